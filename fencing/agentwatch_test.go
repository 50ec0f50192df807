package fencing

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
	w := newAgentLossWatch(hbs, func() time.Time { return now })
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
