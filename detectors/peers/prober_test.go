package peers

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// A peer whose kubelet's port answers is reachable in the reports, but only a probe its agent
// acknowledged makes it a path for the self-fencer (AnyAcknowledged): the controller hears of
// no other.
func TestProberCountsOnlyAcknowledgedProbesAsAPath(t *testing.T) {
	kubelet, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Close()
	go func() {
		for {
			c, err := kubelet.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	for _, tc := range []struct {
		name      string
		agent     error
		reachable bool
	}{
		{"the agent acknowledged", nil, true},
		{"the agent did not acknowledge, the kubelet's port answered", fmt.Errorf("%w: an old agent", ErrNotAcknowledged), true},
		{"the agent answered nothing, the kubelet's port answered", errors.New("connection refused"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agentProbe := func(context.Context, string, string) error { return tc.agent }
			p := NewProber(Config{Interval: time.Second}, logr.Discard(), agentProbe)
			p.SetTargets([]agentwire.PeerTarget{{Node: "b", Addresses: []string{"127.0.0.1:9444", kubelet.Addr().String()}}})
			p.probeAll(t.Context())
			if r := p.Reports(); len(r) != 1 || r[0].Reachable != tc.reachable {
				t.Errorf("reports %+v, want b reachable %t", r, tc.reachable)
			}
			if got, want := p.AnyAcknowledged(time.Minute), tc.agent == nil; got != want {
				t.Errorf("AnyAcknowledged = %t, want %t", got, want)
			}
			if p.AnyAcknowledged(0) {
				t.Error("AnyAcknowledged within 0s: the window bounds the path")
			}
		})
	}
	var none *Prober
	if none.AnyAcknowledged(time.Minute) {
		t.Error("a node that probes no peers has a path")
	}
}
