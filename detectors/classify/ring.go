package classify

import (
	"hash/fnv"
	"sort"
)

// DefaultProbePeers is how many peers each node probes.
const DefaultProbePeers = 3

// Ring orders nodes on a hash ring for peer probing: each node probes the k nodes that follow
// it, so each node is probed by the k nodes that precede it. Hashing the names scatters
// neighbours (node-001, node-002, … rarely share a probe set), the order depends only on the
// set of names, and adding or removing one node changes the probe targets of k nodes only.
// A Ring is immutable and safe for concurrent use.
type Ring struct {
	order []string
	pos   map[string]int
}

// NewRing builds the ring of nodes (duplicates and empty names are dropped). O(n log n).
func NewRing(nodes []string) *Ring {
	type entry struct {
		name string
		hash uint64
	}
	seen := make(map[string]bool, len(nodes))
	entries := make([]entry, 0, len(nodes))
	for _, n := range nodes {
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		entries = append(entries, entry{n, hashName(n)})
	}
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].hash != entries[j].hash {
			return entries[i].hash < entries[j].hash
		}
		return entries[i].name < entries[j].name
	})
	r := &Ring{order: make([]string, len(entries)), pos: make(map[string]int, len(entries))}
	for i, e := range entries {
		r.order[i], r.pos[e.name] = e.name, i
	}
	return r
}

// Len is the number of nodes on the ring.
func (r *Ring) Len() int { return len(r.order) }

// Targets returns the peers node probes: the min(k, n-1) nodes after it on the ring (k <= 0
// means DefaultProbePeers), or nil when node is not on the ring. O(k).
func (r *Ring) Targets(node string, k int) []string { return r.walk(node, k, 1) }

// Probers returns the peers that probe node: the min(k, n-1) nodes before it on the ring, or nil
// when node is not on the ring. They are the nodes whose Targets include node.
func (r *Ring) Probers(node string, k int) []string { return r.walk(node, k, -1) }

func (r *Ring) walk(node string, k, step int) []string {
	i, ok := r.pos[node]
	if !ok {
		return nil
	}
	if k <= 0 {
		k = DefaultProbePeers
	}
	n := len(r.order)
	if k > n-1 {
		k = n - 1
	}
	out := make([]string, 0, k)
	for j := 1; j <= k; j++ {
		out = append(out, r.order[((i+step*j)%n+n)%n])
	}
	return out
}

// hashName is FNV-1a followed by a 64-bit finalizer (splitmix64) to spread similar names.
func hashName(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
