package observe

import (
	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/detectors/classify"
)

// Signals turns a Snapshot into the classifier's inputs: each node's own heartbeat, and the
// reports about each node made by its peers (their probes of it, and its probes of them that
// they acknowledged). O(nodes × peers).
func Signals(snapshot map[string]agentwire.Heartbeat) (map[string]classify.Agent, map[string][]classify.PeerReport) {
	agents := make(map[string]classify.Agent, len(snapshot))
	peers := make(map[string][]classify.PeerReport, len(snapshot))
	for node, hb := range snapshot {
		agents[node] = agentOf(hb)
		hb.Node = node
		hb.Sightings(func(about string, s agentwire.Sighting) { peers[about] = append(peers[about], peerReport(s)) })
	}
	return agents, peers
}

// agentOf is the classifier's view of a node's own latest heartbeat.
func agentOf(hb agentwire.Heartbeat) classify.Agent {
	return classify.Agent{LastSeen: hb.Received, Interval: hb.Interval, KubeletHealthy: hb.KubeletHealthy}
}

// sightings turns the peers' reports about one node into the classifier's inputs.
func sightings(about []agentwire.Sighting) []classify.PeerReport {
	if len(about) == 0 {
		return nil
	}
	out := make([]classify.PeerReport, len(about))
	for i, s := range about {
		out[i] = peerReport(s)
	}
	return out
}

func peerReport(s agentwire.Sighting) classify.PeerReport {
	return classify.PeerReport{From: s.From, Reachable: s.Reachable, At: s.At, Inbound: s.Inbound, Interval: s.Interval}
}
