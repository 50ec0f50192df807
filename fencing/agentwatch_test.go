package fencing

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/detectors/classify"
)

// TestAgentLossWatch: a node is sent once, on the first scan after its agent missed
// classify.DefaultMissedHeartbeats of its interval (the default interval when it reports none),
// not again while it stays lost, and again when it is lost anew after being heard, or after
// being forgotten and heard again.
func TestAgentLossWatch(t *testing.T) {
	now := time.Unix(1000, 0)
	grace := time.Duration(classify.DefaultMissedHeartbeats)
	hbs := heartbeats{
		"fresh":     {Node: "fresh", Received: now, Interval: time.Second},
		"slow":      {Node: "slow", Received: now.Add(-grace * time.Second), Interval: 2 * time.Second},
		"lost":      {Node: "lost", Received: now.Add(-grace*time.Second - time.Millisecond), Interval: time.Second},
		"defaulted": {Node: "defaulted", Received: now.Add(-grace*classify.DefaultInterval - time.Millisecond)},
	}
	w := newAgentLossWatch(hbs, nil, func() time.Time { return now })
	scan := func() []string {
		w.scan(context.Background())
		var sent []string
		for {
			select {
			case e := <-w.events:
				sent = append(sent, e.Object.GetName())
			default:
				return sent
			}
		}
	}
	sameSet := cmp.Transformer("set", func(s []string) map[string]bool {
		m := map[string]bool{}
		for _, n := range s {
			m[n] = true
		}
		return m
	})
	steps := []struct {
		name   string
		change func()
		want   []string
	}{
		{"first scan", func() {}, []string{"lost", "defaulted"}},
		{"still lost", func() { now = now.Add(time.Second) }, nil},
		{"slow times out, and fresh", func() { now = now.Add(3 * time.Second) }, []string{"slow", "fresh"}},
		{"lost is heard again", func() { hbs["lost"] = agentwire.Heartbeat{Node: "lost", Received: now, Interval: time.Second} }, nil},
		{"and lost again", func() { now = now.Add(grace*time.Second + time.Millisecond) }, []string{"lost"}},
		{"defaulted is forgotten", func() { delete(hbs, "defaulted") }, nil},
		{"and comes back lost", func() {
			hbs["defaulted"] = agentwire.Heartbeat{Node: "defaulted", Received: now.Add(-time.Hour)}
		}, []string{"defaulted"}},
	}
	for _, st := range steps {
		st.change()
		if diff := cmp.Diff(st.want, scan(), sameSet); diff != "" {
			t.Errorf("%s: nodes sent (-want +got):\n%s", st.name, diff)
		}
	}
}

// An agent asked for a longer interval than its latest heartbeat reports (the policy's raised
// from 1s to 30s) is sent as lost only three of the asked intervals into its silence, as the
// classifier judges it, not three of its old second: else the watch would send it at once and
// not again when it is lost for good. One asked for a shorter interval keeps its reported one
// until it reports the new.
func TestAgentLossWatchJudgesByTheAskedIntervalWhenLonger(t *testing.T) {
	now := time.Unix(1000, 0)
	hbs := heartbeats{
		"raised":  {Node: "raised", Received: now.Add(-10 * time.Second), Interval: time.Second},
		"lowered": {Node: "lowered", Received: now.Add(-10 * time.Second), Interval: 30 * time.Second},
	}
	asked := map[string]time.Duration{"raised": 30 * time.Second, "lowered": time.Second}
	start, now := now, now
	w := newAgentLossWatch(hbs, func(n string) time.Duration { return asked[n] }, func() time.Time { return now })
	for _, st := range []struct {
		at   time.Duration // after the first scan
		want []string
	}{{0, nil}, {79 * time.Second, nil}, {81 * time.Second, []string{"lowered", "raised"}}} {
		now = start.Add(st.at)
		w.scan(context.Background())
		if diff := cmp.Diff(st.want, drained(w.events)); diff != "" {
			t.Errorf("%s after the first scan: nodes sent (-want +got):\n%s", st.at, diff)
		}
	}
}

// The watch sends each node whose agent it hears for the first time once (its look marks it as
// running an agent), and again only when it was heard anew after knownFor unheard.
func TestAgentWatchSendsTheFirstHeard(t *testing.T) {
	now := time.Unix(1000, 0)
	hbs := heartbeats{
		"a": {Node: "a", Received: now, Interval: time.Second},
		"b": {Node: "b", Received: now.Add(-time.Hour), Interval: time.Second}, // heard long ago: lost, but heard
	}
	w := newAgentLossWatch(hbs, nil, func() time.Time { return now })
	for _, st := range []struct {
		name   string
		change func()
		want   []string
	}{
		{"first scan", func() {}, []string{"a", "b"}},
		{"again", func() { now = now.Add(time.Second) }, nil},
		{"c heard", func() { hbs["c"] = agentwire.Heartbeat{Node: "c", Received: now, Interval: time.Second} }, []string{"c"}},
		{"a forgotten", func() { delete(hbs, "a") }, nil},
		// An agent whose Node is gone: its look forgets it, its next heartbeat records it again.
		{"a heard again soon: not sent again", func() { hbs["a"] = agentwire.Heartbeat{Node: "a", Received: now, Interval: time.Second} }, nil},
		{"a forgotten for longer", func() { delete(hbs, "a"); now = now.Add(knownFor + time.Second) }, nil},
		{"a heard anew", func() { hbs["a"] = agentwire.Heartbeat{Node: "a", Received: now, Interval: time.Second} }, []string{"a"}},
	} {
		st.change()
		w.scan(context.Background())
		if diff := cmp.Diff(st.want, drained(w.firstHeard)); diff != "" {
			t.Errorf("%s: nodes sent as first heard (-want +got):\n%s", st.name, diff)
		}
	}
}

// drained is the names of the nodes sent on ch, sorted (nil for none).
func drained(ch chan event.GenericEvent) []string {
	var sent []string
	for len(ch) > 0 {
		sent = append(sent, (<-ch).Object.GetName())
	}
	slices.Sort(sent)
	return sent
}
