package fencing

import (
	"testing"
	"time"
)

// TestRepeats: a node's repeated line is due once every repeatEvery, each node and each line on
// its own clock, and a forgotten node's next line is due at once.
func TestRepeats(t *testing.T) {
	var r repeats
	t0 := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	steps := []struct {
		node, line string
		at         time.Duration
		want       bool
	}{
		{"a", "storm", 0, true},
		{"a", "storm", time.Second, false},
		{"a", "alive", time.Second, true},
		{"b", "storm", time.Second, true},
		{"a", "storm", repeatEvery - time.Millisecond, false},
		{"a", "storm", repeatEvery, true},
		{"a", "storm", repeatEvery + time.Second, false},
		{"b", "storm", repeatEvery + time.Second, true},
	}
	for i, s := range steps {
		if got := r.due(s.node, s.line, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d (%s %s at +%s): due %v, want %v", i, s.node, s.line, s.at, got, s.want)
		}
	}
	r.forget("a")
	if !r.due("a", "storm", t0.Add(repeatEvery+2*time.Second)) {
		t.Error("a forgotten node's line is not due at once")
	}
	if r.due("b", "storm", t0.Add(repeatEvery+2*time.Second)) {
		t.Error("forgetting node a forgot node b's line too")
	}
	// A clock stepped back does not silence the line until it catches up.
	if !r.due("a", "storm", t0) {
		t.Error("after the clock stepped back, the line is not due")
	}
}
