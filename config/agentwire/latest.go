package agentwire

import "time"

// Sighting is one peer's report about a node, as the node's observers read it.
type Sighting struct {
	// From names the reporting peer.
	From      string
	Reachable bool
	// At is when the peer probed, on the server's clock.
	At time.Time
}

// LatestOf is what a heartbeat source's Latest returns, computed from a full Snapshot: node's
// latest heartbeat (ok false when it has none) and every report about node in the other nodes'
// latest heartbeats. It reads every heartbeat (O(nodes × peers)); a source that keeps an index
// answers the same in O(peers), and tests compare the two.
func LatestOf(snapshot map[string]Heartbeat, node string) (hb Heartbeat, about []Sighting, ok bool) {
	hb, ok = snapshot[node]
	for from, other := range snapshot {
		for _, p := range other.Peers {
			if p.Node == node {
				about = append(about, Sighting{From: from, Reachable: p.Reachable, At: p.At})
			}
		}
	}
	return hb, about, ok
}

// EachReceivedOf is what a heartbeat source's EachReceived does, over a full Snapshot.
func EachReceivedOf(snapshot map[string]Heartbeat, fn func(node string, received time.Time, interval time.Duration)) {
	for n, hb := range snapshot {
		fn(n, hb.Received, hb.Interval)
	}
}
