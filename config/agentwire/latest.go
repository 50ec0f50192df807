package agentwire

import "time"

// Sighting is one peer's report about a node, as the node's observers read it.
type Sighting struct {
	// From names the reporting peer.
	From      string
	Reachable bool
	// At is when the peer probed, on the server's clock.
	At time.Time
	// Inbound says the node probed From rather than From the node: From's agent acknowledged
	// the node's probe at At (Reachable is true). The node's agent counts that as a path.
	Inbound bool
	// Interval is From's heartbeat interval (0: unknown): its reports come that far apart.
	Interval time.Duration
}

// Sightings calls fn with every report hb makes about another node (about): its probes of its
// peers, then the probes by peers that it acknowledged (Inbound).
func (hb Heartbeat) Sightings(fn func(about string, s Sighting)) {
	for _, p := range hb.Peers {
		fn(p.Node, Sighting{From: hb.Node, Reachable: p.Reachable, At: p.At, Interval: hb.Interval})
	}
	for _, p := range hb.ProbedBy {
		fn(p.Node, Sighting{From: hb.Node, Reachable: true, At: p.At, Inbound: true, Interval: hb.Interval})
	}
}

// LatestOf is what a heartbeat source's Latest returns, computed from a full Snapshot: node's
// latest heartbeat (ok false when it has none) and every report about node in the other nodes'
// latest heartbeats. It reads every heartbeat (O(nodes × peers)); a source that keeps an index
// answers the same in O(peers), and tests compare the two.
func LatestOf(snapshot map[string]Heartbeat, node string) (hb Heartbeat, about []Sighting, ok bool) {
	hb, ok = snapshot[node]
	for from, other := range snapshot {
		other.Node = from
		other.Sightings(func(n string, s Sighting) {
			if n == node {
				about = append(about, s)
			}
		})
	}
	return hb, about, ok
}

// LastReachedOf is the latest acknowledgement of node's probe that the heartbeats of snapshot
// report (zero for none): the least a heartbeat source's LastReached returns, which also keeps
// those its nodes' earlier heartbeats reported.
func LastReachedOf(snapshot map[string]Heartbeat, node string) time.Time {
	var last time.Time
	for _, hb := range snapshot {
		for _, p := range hb.ProbedBy {
			if p.Node == node && p.At.After(last) {
				last = p.At
			}
		}
	}
	return last
}

// EachReceivedOf is what a heartbeat source's EachReceived does, over a full Snapshot.
func EachReceivedOf(snapshot map[string]Heartbeat, fn func(node string, received time.Time, interval time.Duration)) {
	for n, hb := range snapshot {
		fn(n, hb.Received, hb.Interval)
	}
}
