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
// of a storm is thinned here, node by node. The first line of an episode is always written: a
// node judged not failed again is forgotten.
type repeats struct {
	mu   sync.Mutex
	last map[string]map[string]time.Time // by node, then line
}

// due says whether line about node is to be written now at the default verbosity, and if so
// takes note of it.
func (r *repeats) due(node, line string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := r.last[node]
	if t, ok := lines[line]; ok && now.Sub(t) < repeatEvery && !now.Before(t) {
		return false
	}
	if lines == nil {
		if r.last == nil {
			r.last = map[string]map[string]time.Time{}
		}
		lines = map[string]time.Time{}
		r.last[node] = lines
	}
	lines[line] = now
	return true
}

// forget drops node's lines: it was deleted, or is judged not failed (its episode is over).
func (r *repeats) forget(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.last, node)
}
