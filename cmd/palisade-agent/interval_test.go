package main

import (
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/channel"
)

// TestIntervalFromController: the controller's answer carries the node's policy interval; the
// agent adopts it for its heartbeats (and says so in them), and ignores one out of range.
func TestIntervalFromController(t *testing.T) {
	for _, tc := range []struct {
		name     string
		asked    time.Duration
		wantBeat time.Duration
	}{{"policy interval adopted", 200 * time.Millisecond, 200 * time.Millisecond}, {"out of range ignored", 10 * time.Millisecond, time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			e.startServer(t, "127.0.0.1:0", func(o *channel.ServerOptions) {
				o.IntervalFor = func(string) time.Duration { return tc.asked }
			})
			k := newKubelet()
			defer k.srv.Close()
			p := e.startAgent(t, e.server.Addr(), k.srv.URL, time.Second)
			e.next(t, 5*time.Second)
			e.next(t, 5*time.Second) // the first answer set the interval (or was ignored)
			start := time.Now()
			var last agentwire.Heartbeat
			for range 4 {
				last = e.next(t, 5*time.Second)
			}
			gap := time.Since(start) / 4
			if gap < tc.wantBeat*7/10 || gap > tc.wantBeat*13/10 || last.Interval != tc.wantBeat {
				t.Errorf("heartbeats %s apart, reporting interval %s; want about %s", gap, last.Interval, tc.wantBeat)
			}
			if tc.asked == tc.wantBeat {
				p.waitForLog(t, "heartbeat interval set by the controller", time.Second)
			} else {
				p.waitForLog(t, "ignoring a heartbeat interval out of range", time.Second)
			}
		})
	}
}

// TestLongerIntervalKeepsTheAgentHeard: a real agent started with its default second under a
// policy asking 5s (an agent restarted, or the policy's interval raised) adopts 5 s on the
// first answer and goes quiet that long; it reports the new interval at once, and the
// controller does not count it lost (AgentCounts, the classifier's rule) 4 s into its
// silence, past three of the second its first heartbeat reported.
func TestLongerIntervalKeepsTheAgentHeard(t *testing.T) {
	asked := 5 * time.Second
	e := newEnv(t, "")
	e.startServer(t, "127.0.0.1:0", func(o *channel.ServerOptions) {
		o.IntervalFor = func(string) time.Duration { return asked }
	})
	k := newKubelet()
	defer k.srv.Close()
	e.startAgent(t, e.server.Addr(), k.srv.URL, time.Second)
	first := e.next(t, 5*time.Second)
	if first.Interval != time.Second {
		t.Fatalf("first heartbeat reports %s, want the agent's own 1s", first.Interval)
	}
	select {
	case second := <-e.beats:
		if second.Interval != asked {
			t.Errorf("the heartbeat after the answer reports %s, want %s", second.Interval, asked)
		}
	case <-time.After(time.Second):
		t.Errorf("no heartbeat within 1s of the answer: the agent did not report %s at once", asked)
	}
	time.Sleep(time.Until(first.Received.Add(4 * time.Second)))
	if missing, heartbeating := e.server.AgentCounts(); missing != 0 || heartbeating != 1 {
		t.Errorf("4 s after the first heartbeat: %d missing and %d heartbeating, want 0 and 1", missing, heartbeating)
	}
}
