package observe

import (
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"palisade.dev/palisade/detectors/classify"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func TestSignals(t *testing.T) {
	snap := map[string]agentwire.Heartbeat{
		"a": {Node: "a", Received: t0, Interval: time.Second, KubeletHealthy: true, Peers: []agentwire.PeerReport{{Node: "b", Reachable: true, At: t0}, {Node: "c", At: t0}}},
		"b": {Node: "b", Received: t0.Add(-time.Minute), Peers: []agentwire.PeerReport{{Node: "c", Reachable: true, At: t0.Add(-time.Minute)}}},
	}
	agents, peers := Signals(snap)
	wantAgents := map[string]classify.Agent{
		"a": {LastSeen: t0, Interval: time.Second, KubeletHealthy: true},
		"b": {LastSeen: t0.Add(-time.Minute)},
	}
	if diff := cmp.Diff(wantAgents, agents); diff != "" {
		t.Errorf("agents (-want +got):\n%s", diff)
	}
	wantPeers := map[string][]classify.PeerReport{
		"b": {{From: "a", Reachable: true, At: t0, Interval: time.Second}},
		"c": {{From: "a", At: t0, Interval: time.Second}, {From: "b", Reachable: true, At: t0.Add(-time.Minute)}},
	}
	sortReports := cmpopts.SortSlices(func(a, b classify.PeerReport) bool { return a.From < b.From })
	if diff := cmp.Diff(wantPeers, peers, sortReports); diff != "" {
		t.Errorf("peers (-want +got):\n%s", diff)
	}
}
