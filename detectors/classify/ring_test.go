package classify

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func nodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
	}
	return names
}

// TestRingBoundAndCoverage checks, for cluster sizes around k and up to 5000 nodes, that each
// node probes min(k, n-1) distinct others and is probed by exactly as many, so every node is
// probed by at least one other whenever n > 1.
func TestRingBoundAndCoverage(t *testing.T) {
	for _, k := range []int{1, 3, 5} {
		for _, n := range []int{1, 2, 3, 4, 5, 6, 10, 100, 5000} {
			t.Run(fmt.Sprintf("k=%d/n=%d", k, n), func(t *testing.T) {
				checkRing(t, nodeNames(n), k)
			})
		}
	}
}

func checkRing(t *testing.T, names []string, k int) {
	t.Helper()
	r := NewRing(names)
	want := min(k, len(names)-1)
	probedBy := make(map[string]int, len(names))
	for _, n := range names {
		targets := r.Targets(n, k)
		if len(targets) != want {
			t.Fatalf("%s probes %d peers, want %d", n, len(targets), want)
		}
		seen := map[string]bool{}
		for _, p := range targets {
			if p == n || seen[p] {
				t.Fatalf("%s probes %v: itself or a duplicate", n, targets)
			}
			seen[p] = true
			probedBy[p]++
		}
		probers := r.Probers(n, k)
		for _, p := range probers {
			if !slices.Contains(r.Targets(p, k), n) {
				t.Fatalf("Probers(%s) = %v, but %s does not probe it", n, probers, p)
			}
		}
	}
	for _, n := range names {
		if probedBy[n] != want {
			t.Fatalf("%s is probed by %d peers, want %d", n, probedBy[n], want)
		}
	}
}

func TestRingDeterministic(t *testing.T) {
	names := nodeNames(200)
	shuffled := slices.Clone(names)
	rand.New(rand.NewSource(1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	withDuplicates := append(slices.Clone(shuffled), names[:50]...)
	a, b, c := NewRing(names), NewRing(shuffled), NewRing(append(withDuplicates, ""))
	for _, n := range names {
		if diff := cmp.Diff(a.Targets(n, 3), b.Targets(n, 3)); diff != "" {
			t.Fatalf("targets of %s depend on input order (-sorted +shuffled):\n%s", n, diff)
		}
		if diff := cmp.Diff(a.Targets(n, 3), c.Targets(n, 3)); diff != "" {
			t.Fatalf("targets of %s depend on duplicates (-sorted +duplicates):\n%s", n, diff)
		}
	}
	if got := NewRing(shuffled).Targets("node-0007", 3); !slices.Equal(got, a.Targets("node-0007", 3)) {
		t.Errorf("NewRing(shuffled).Targets = %v, want %v", got, a.Targets("node-0007", 3))
	}
}

// TestRingStable: one node joining changes the targets of at most k nodes.
func TestRingStable(t *testing.T) {
	names := nodeNames(1000)
	before, after := NewRing(names), NewRing(append(slices.Clone(names), "node-new"))
	changed := 0
	for _, n := range names {
		if !slices.Equal(before.Targets(n, 3), after.Targets(n, 3)) {
			changed++
		}
	}
	if changed > 3 {
		t.Errorf("a joining node changed the targets of %d nodes, want at most 3", changed)
	}
}

func TestRingEdges(t *testing.T) {
	r := NewRing([]string{"a", "b"})
	if got := r.Targets("unknown", 3); got != nil {
		t.Errorf("Targets(unknown) = %v, want nil", got)
	}
	if got := r.Targets("a", 0); !slices.Equal(got, []string{"b"}) {
		t.Errorf("Targets(a, default k) = %v, want [b]", got)
	}
	if got := NewRing(nil).Len(); got != 0 {
		t.Errorf("empty ring Len = %d", got)
	}
}

// BenchmarkRingBuildAndTargets5000 is one agent's work when the node list changes: build the ring of
// 5000 nodes and pick its targets.
func BenchmarkRingBuildAndTargets5000(b *testing.B) {
	names := nodeNames(5000)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = NewRing(names).Targets(names[i%len(names)], DefaultProbePeers)
	}
}

// BenchmarkRingTargets5000 is one lookup on a built ring of 5000 nodes.
func BenchmarkRingTargets5000(b *testing.B) {
	names := nodeNames(5000)
	r := NewRing(names)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = r.Targets(names[i%len(names)], DefaultProbePeers)
	}
}

// BenchmarkRingAllProbers5000 is the controller's work: who probes each of 5000 nodes.
func BenchmarkRingAllProbers5000(b *testing.B) {
	names := nodeNames(5000)
	b.ReportAllocs()
	for b.Loop() {
		r := NewRing(names)
		for _, n := range names {
			_ = r.Probers(n, DefaultProbePeers)
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	s := Signals{Node: "n1", Lease: staleLease, Agent: lostAgent, Peers: []PeerReport{peer("n2", true, 0), peer("n3", false, 0), peer("n4", false, 0)}}
	b.ReportAllocs()
	for b.Loop() {
		_ = Classify(s, Config{}, now)
	}
}
