package fencing

import (
	"sync"
	"time"
)

// repeatEvery is how often a line that a node's recheck repeats (the storm guard holding, a
// node alive on other signals) is written at the default verbosity; the rechecks between write
// it at V(1). The node's Event says the same, aggregated by the event recorder.
const repeatEvery = time.Minute

// repeats remembers, by node and line, when the line was last written at the default
// verbosity. The controller's logger does not sample (it dropped lines with no trace when
// thousands of nodes logged at once), so a line that comes back every second for every node
// of a storm is thinned here, node by node, and each node's first one is always written.
type repeats struct {
	mu   sync.Mutex
	last map[repeatKey]time.Time
}

type repeatKey struct{ node, line string }

// due says whether line about node is to be written now at the default verbosity, and if so
// takes note of it.
func (r *repeats) due(node, line string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := repeatKey{node, line}
	if t, ok := r.last[k]; ok && now.Sub(t) < repeatEvery && !now.Before(t) {
		return false
	}
	if r.last == nil {
		r.last = map[repeatKey]time.Time{}
	}
	r.last[k] = now
	return true
}

// forget drops a deleted node's lines.
func (r *repeats) forget(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.last {
		if k.node == node {
			delete(r.last, k)
		}
	}
}
