package channel

import (
	"fmt"
	"testing"

	"palisade.dev/palisade/config/agentwire"
)

func TestPeerBookAssignsBoundedProbes(t *testing.T) {
	b := newPeerBook(0)
	for i := range 10 {
		b.update(fmt.Sprintf("n%d", i), probeAddresses(agentwire.Report{ProbePort: 9444, KubeletPort: 10250}, fmt.Sprintf("10.0.0.%d:5555", i)))
	}
	b.update("silent", nil) // accepts no probes: never a target, probes nobody
	probedBy := map[string]int{}
	for i := range 10 {
		node := fmt.Sprintf("n%d", i)
		ts := b.targets(node)
		if len(ts) != 3 {
			t.Fatalf("%s probes %d peers, want 3", node, len(ts))
		}
		for _, tg := range ts {
			if tg.Node == node || tg.Node == "silent" {
				t.Fatalf("%s assigned to probe %s", node, tg.Node)
			}
			want := []string{"10.0.0." + tg.Node[1:] + ":9444", "10.0.0." + tg.Node[1:] + ":10250"}
			if !equal(tg.Addresses, want) {
				t.Fatalf("addresses of %s = %v, want %v (probe port, then kubelet port, at the heartbeat's source address)", tg.Node, tg.Addresses, want)
			}
			probedBy[tg.Node]++
		}
	}
	for node, n := range probedBy {
		if n != 3 {
			t.Errorf("%s probed by %d peers, want 3", node, n)
		}
	}
	if ts := b.targets("silent"); len(ts) != 0 {
		t.Errorf("a node that accepts no probes got targets %v", ts)
	}
	b.update("n1", probeAddresses(agentwire.Report{ProbePort: 9444, ProbeHost: "192.0.2.1"}, "10.0.0.1:5555"))
	for i := range 10 {
		for _, tg := range b.targets(fmt.Sprintf("n%d", i)) {
			if tg.Node == "n1" && !equal(tg.Addresses, []string{"192.0.2.1:9444"}) {
				t.Errorf("n1's advertised host not used: %v", tg.Addresses)
			}
		}
	}
	b.forget("n1")
	for i := range 10 {
		for _, tg := range b.targets(fmt.Sprintf("n%d", i)) {
			if tg.Node == "n1" {
				t.Errorf("forgotten n1 still a target of n%d", i)
			}
		}
	}
	off := newPeerBook(-1)
	off.update("n0", []string{"10.0.0.0:9444"})
	off.update("n1", []string{"10.0.0.1:9444"})
	if len(off.targets("n0")) != 0 {
		t.Error("probing turned off, still targets")
	}
}
