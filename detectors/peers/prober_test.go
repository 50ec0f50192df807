package peers

import (
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
)

// TestProberReports: results of a probe round are dropped for a peer the controller
// no longer assigns, and a report carries at most agentwire.MaxPeers results.
func TestProberReports(t *testing.T) {
	p := NewProber(Config{Interval: 100 * time.Millisecond}, logr.Discard(), nil)
	targets := make([]agentwire.PeerTarget, agentwire.MaxPeers+5)
	for i := range targets {
		targets[i] = agentwire.PeerTarget{Node: "n" + strconv.Itoa(i), Addresses: []string{"127.0.0.1:1"}}
	}
	p.SetTargets(targets)
	p.probeAll(t.Context())
	if got := len(p.Reports()); got != agentwire.MaxPeers {
		t.Fatalf("%d reports, want the cap %d", got, agentwire.MaxPeers)
	}
	for _, r := range p.Reports() {
		if r.Reachable {
			t.Fatalf("%s reachable through a closed loopback port", r.Node)
		}
	}
	p.SetTargets(targets[:1])
	if got := p.Reports(); len(got) != 1 || got[0].Node != "n0" {
		t.Fatalf("after narrowing the targets: %+v, want n0 only", got)
	}
}
