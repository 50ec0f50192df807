package channel

import (
	"net"
	"strconv"
	"sync"

	"palisade.dev/palisade/config/agentwire"

	"palisade.dev/palisade/detectors/classify"
)

// probeAddresses are where peers probe the node that sent rep from remoteAddr: the agent's probe
// port and the kubelet's port, at ProbeHost or else at the host the heartbeat came from.
func probeAddresses(rep agentwire.Report, remoteAddr string) []string {
	if rep.ProbePort <= 0 {
		return nil
	}
	host := rep.ProbeHost
	if host == "" {
		h, _, err := net.SplitHostPort(remoteAddr)
		if err != nil {
			return nil
		}
		host = h
	}
	addrs := []string{net.JoinHostPort(host, strconv.Itoa(rep.ProbePort))}
	if rep.KubeletPort > 0 {
		addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(rep.KubeletPort)))
	}
	return addrs
}

// peerBook assigns the probe targets: every node that accepts probes is on a hash ring
// (classify.Ring), and probes the k nodes after it, so that every node is probed by k peers
// however large the cluster. The ring is rebuilt only when the set of probe-able nodes changes.
type peerBook struct {
	k     int
	mu    sync.Mutex
	addrs map[string][]string // probe addresses by node, of nodes that accept probes
	ring  *classify.Ring      // nil: to be rebuilt
}

func newPeerBook(k int) *peerBook {
	if k == 0 {
		k = classify.DefaultProbePeers
	}
	return &peerBook{k: k, addrs: map[string][]string{}}
}

// update records node's probe addresses (none: it accepts no probes).
func (b *peerBook) update(node string, addrs []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, had := b.addrs[node]
	switch {
	case len(addrs) == 0 && had:
		delete(b.addrs, node)
		b.ring = nil
	case len(addrs) == 0:
	case !had:
		b.addrs[node], b.ring = addrs, nil
	case !equal(old, addrs):
		b.addrs[node] = addrs // same ring, new address
	}
}

func (b *peerBook) forget(node string) { b.update(node, nil) }

// targets returns the peers node is to probe; none when k < 0 or node accepts no probes.
func (b *peerBook) targets(node string) []agentwire.PeerTarget {
	if b.k < 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ring == nil {
		names := make([]string, 0, len(b.addrs))
		for n := range b.addrs {
			names = append(names, n)
		}
		b.ring = classify.NewRing(names)
	}
	peers := b.ring.Targets(node, b.k)
	out := make([]agentwire.PeerTarget, 0, len(peers))
	for _, p := range peers {
		out = append(out, agentwire.PeerTarget{Node: p, Addresses: b.addrs[p]})
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
