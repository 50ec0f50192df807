package channel

import (
	"context"
	"sync"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
)

// fakeClock is the server's clock in a test: it moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// TestAgentCounts sends real heartbeats over mutual TLS from three agents (1s, 2s and no
// stated interval) and moves the server's clock: each agent counts as heartbeating up to and
// including 3 of its intervals after its latest heartbeat, and as missing after; a heartbeat
// brings it back, and a forgotten node counts no more.
func TestAgentCounts(t *testing.T) {
	p := newPKI(t)
	start := time.Now() // the agents' certificates are valid from now
	clock := &fakeClock{now: start}
	s := startServer(t, p, ServerOptions{Now: clock.Now})
	send := func(node string, intervalMillis int64) {
		t.Helper()
		certFile, keyFile := p.agentFiles(t, p.ca, node)
		c := newClient(t, p, s.Addr(), certFile, keyFile)
		if _, err := c.Send(context.Background(), agentwire.Report{Node: node, IntervalMillis: intervalMillis}); err != nil {
			t.Fatalf("heartbeat of %s: %v", node, err)
		}
	}
	check := func(when string, missing, heartbeating int) {
		t.Helper()
		if m, h := s.AgentCounts(); m != missing || h != heartbeating {
			t.Errorf("%s: %v missing and %v heartbeating, want %d and %d", when, m, h, missing, heartbeating)
		}
	}

	check("before any heartbeat", 0, 0)
	send("n1", 1000)
	send("n2", 2000)
	send("n3", 0) // classify.DefaultInterval, 1s
	check("right after the heartbeats", 0, 3)

	clock.Set(start.Add(3 * time.Second))
	check("3 intervals of n1 and n3 after", 0, 3)
	clock.Set(start.Add(3*time.Second + time.Millisecond))
	check("just over 3 intervals of n1 and n3 after", 2, 1)

	send("n1", 1000)
	check("n1 heartbeating again", 1, 2)

	clock.Set(start.Add(6*time.Second + time.Millisecond))
	check("just over 3 intervals of n2 after", 2, 1)
	clock.Set(start.Add(6*time.Second + 2*time.Millisecond))
	check("everyone silent for over 3 intervals", 3, 0)

	s.Forget("n3")
	check("n3 forgotten", 2, 0)
}

// An agent asked for a longer interval than it reports (its policy's raised from 1s to 30s)
// counts as heartbeating through three of the asked intervals after its latest heartbeat, as
// the classifier judges it, and as missing after; one asked for a shorter interval keeps its
// own until it reports the new.
func TestAgentCountsJudgeByTheAskedIntervalWhenLonger(t *testing.T) {
	p := newPKI(t)
	start := time.Now()
	clock := &fakeClock{now: start}
	asked := map[string]time.Duration{"raised": 30 * time.Second, "lowered": time.Second}
	s := startServer(t, p, ServerOptions{Now: clock.Now, IntervalFor: func(n string) time.Duration { return asked[n] }})
	for node, every := range map[string]int64{"raised": 1000, "lowered": 30_000} {
		certFile, keyFile := p.agentFiles(t, p.ca, node)
		if _, err := newClient(t, p, s.Addr(), certFile, keyFile).Send(context.Background(), agentwire.Report{Node: node, IntervalMillis: every}); err != nil {
			t.Fatalf("heartbeat of %s: %v", node, err)
		}
	}
	for _, st := range []struct {
		after                 time.Duration
		missing, heartbeating int
	}{{10 * time.Second, 0, 2}, {90 * time.Second, 0, 2}, {90*time.Second + time.Millisecond, 2, 0}} {
		clock.Set(start.Add(st.after))
		if m, h := s.AgentCounts(); m != st.missing || h != st.heartbeating {
			t.Errorf("%s after: %d missing and %d heartbeating, want %d and %d", st.after, m, h, st.missing, st.heartbeating)
		}
	}
}
