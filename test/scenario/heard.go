package scenario

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/detectors/classify"
)

// heard keeps what the controller's heartbeat server accepted from the agents (its
// OnHeartbeat): how many heartbeats of each node, and which peers' probes reached each node.
type heard struct {
	mu        sync.Mutex
	beats     map[string]int
	reachedBy map[string]map[string]bool
	interval  time.Duration
}

func newHeard() *heard {
	return &heard{beats: map[string]int{}, reachedBy: map[string]map[string]bool{}}
}

// record is the server's OnHeartbeat: quick, never blocks.
func (h *heard) record(hb agentwire.Heartbeat) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.beats[hb.Node]++
	if hb.Interval > 0 {
		h.interval = hb.Interval
	}
	for _, p := range hb.Peers {
		if !p.Reachable {
			continue
		}
		if h.reachedBy[p.Node] == nil {
			h.reachedBy[p.Node] = map[string]bool{}
		}
		h.reachedBy[p.Node][hb.Node] = true
	}
}

// missing says, per node short of it, what is missing for every node to have had beats
// heartbeats accepted and to be reached by probers of its peers; empty when nothing is.
func (h *heard) missing(nodes []string, beats, probers int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, n := range nodes {
		if b, r := h.beats[n], len(h.reachedBy[n]); b < beats || r < probers {
			out = append(out, fmt.Sprintf("%s: %d of %d heartbeats accepted, reached by %d of %d peers", n, b, beats, r, probers))
		}
	}
	return out
}

// AgentsHeard is what the controller had heard from the agents when WaitAgentsHeard returned.
type AgentsHeard struct {
	// Agents is how many agents were heard: one per node.
	Agents int
	// Interval is their heartbeat interval.
	Interval time.Duration
	// Probers is how many peers' probes reached every node.
	Probers int
}

// WaitAgentsHeard waits until the controller (started by StartController) has accepted beats
// heartbeats from every node's agent and every node has been reached by the probes of its
// peers (as many as probe it: classify.DefaultProbePeers, fewer in a small scene), so that the
// classifier has every signal it needs to tell a dead node from its agents rather than from
// its Lease alone. It fails after timeout, naming what each node still lacks.
func (e *Env) WaitAgentsHeard(ctx context.Context, beats int, timeout time.Duration) (AgentsHeard, error) {
	if e.agents == nil {
		return AgentsHeard{}, errors.New("the scene runs no agents")
	}
	names := make([]string, 0, len(e.Nodes))
	for _, n := range e.Nodes {
		names = append(names, n.Name())
	}
	probers := min(len(names)-1, classify.DefaultProbePeers)
	h := e.agents.heard
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		missing = h.missing(names, beats, probers)
		return len(missing) == 0, nil
	})
	if err != nil {
		return AgentsHeard{}, fmt.Errorf("waiting %s for the controller to hear every agent (%s): %w", timeout, strings.Join(missing, "; "), err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return AgentsHeard{Agents: len(names), Interval: h.interval, Probers: probers}, nil
}
