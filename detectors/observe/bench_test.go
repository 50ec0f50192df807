package observe

import (
	"fmt"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"

	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/classify"
)

// BenchmarkClusterPass5000 is the controller's work for one pass over a 5000-node policy (its
// status every 5 s, the storm guard before each fence): turn one snapshot of the heartbeats,
// each carrying 3 peer reports, into the classifier's inputs, then classify every node.
func BenchmarkClusterPass5000(b *testing.B) {
	const n = 5000
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
	}
	ring := classify.NewRing(names)
	snap := make(map[string]agentwire.Heartbeat, n)
	for _, name := range names {
		hb := agentwire.Heartbeat{Node: name, Received: now.Add(-300 * time.Millisecond), Interval: time.Second, KubeletHealthy: true}
		for _, p := range ring.Targets(name, classify.DefaultProbePeers) {
			hb.Peers = append(hb.Peers, agentwire.PeerReport{Node: p, Reachable: true, At: now.Add(-500 * time.Millisecond)})
		}
		snap[name] = hb
	}
	lease := detectors.Observation{Verdict: detectors.Healthy, LastSeen: now.Add(-2 * time.Second), Reason: "Lease renewed 2s ago"}
	b.ReportAllocs()
	start, passes := time.Now(), 0
	for b.Loop() {
		agents, peers := Signals(snap)
		for _, name := range names {
			_ = classify.Classify(classify.Signals{Node: name, Lease: lease, Agent: agents[name], Peers: peers[name]}, classify.Config{}, now)
		}
		passes++
	}
	fmt.Printf("BENCH classify_pass nodes=%d ms=%.1f\n", n, float64(time.Since(start).Microseconds())/1000/float64(passes))
}
