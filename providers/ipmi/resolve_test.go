package ipmi

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
	"palisade.dev/palisade/test/testbed/ipmisim"
)

// roundRobin is a resolver that answers name with the next of addrs at each lookup, as a
// round-robin DNS name does, and counts its lookups in n; other names do not resolve.
func roundRobin(name string, n *atomic.Int32, addrs ...string) power.Lookup {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		if host != name {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []netip.Addr{netip.MustParseAddr(addrs[int(n.Add(1)-1)%len(addrs)])}, nil
	}
}

// A BMC named by a round-robin DNS name, whose addresses are the node's machine's BMC and
// another machine's: each call resolves the name once, and its ping, identity check and
// ipmitool command all go to that address. The call that resolves to the node's BMC powers the
// node's machine off; the one that resolves to the other machine's is refused by the identity
// check, and that machine gets no command either way. A read-back is checked too: a read of
// the other machine is refused, not taken for the node's power state.
func TestNameResolvedOncePerCall(t *testing.T) {
	node := startBMCOf(t, ipmisim.Options{Host: "127.0.0.2", GUID: simGUID})
	other := startBMCOf(t, ipmisim.Options{Host: "127.0.0.3", Port: node.Port(), GUID: "0f1e2d3c4b5a69788796a5b4c3d2e1f0"})
	var lookups atomic.Int32
	p := New(nil)
	p.lookup = roundRobin("bmc.rack-7.example", &lookups, "127.0.0.2", "127.0.0.3")
	target := Target{Node: "node-1", Address: net.JoinHostPort("bmc.rack-7.example", strconv.Itoa(node.Port())),
		Username: node.Username(), Password: node.Password(), SystemUUID: "33221100-5544-7766-8899-aabbccddeeff"}

	if err := p.PowerOff(context.Background(), target); err != nil {
		t.Fatalf("PowerOff through the name's first address: %v", err)
	}
	if lookups.Load() != 1 {
		t.Errorf("the call looked the name up %d times, want 1", lookups.Load())
	}
	if poweredOn(t, node) {
		t.Errorf("the node's machine is still on")
	}
	wantUntouched(t, other)

	// The next lookup gives the other machine's address: refused, whatever the next one gives.
	err := p.PowerOff(context.Background(), target)
	wantReason(t, err, providers.ReasonBadTarget)
	if !strings.Contains(err.Error(), "not the node's machine") || !strings.Contains(err.Error(), "bmc.rack-7.example resolved to 127.0.0.3") {
		t.Errorf("error %q does not say the BMC is not the node's machine and where the name led", err)
	}
	if lookups.Load() != 2 {
		t.Errorf("two calls looked the name up %d times, want 2", lookups.Load())
	}
	wantUntouched(t, other)

	// Read-backs: the node's machine reads Off; the other machine, off too, is not read: its
	// Off says nothing about the node's.
	if got := powerState(t, p, target); got != PowerOff {
		t.Errorf("PowerState of the node's machine = %v, want off", got)
	}
	if err := other.SetPower(false); err != nil {
		t.Fatal(err)
	}
	state, err := p.PowerState(context.Background(), target)
	wantReason(t, err, providers.ReasonBadTarget)
	if state == PowerOff {
		t.Errorf("PowerState read the other machine's Off")
	}
}

// A name that does not resolve fails the call as Unreachable, naming the name.
func TestNameNotResolved(t *testing.T) {
	p := New(nil)
	p.lookup = roundRobin("bmc.rack-7.example", new(atomic.Int32), "127.0.0.2")
	target := Target{Node: "node-1", Address: "bmc.rack-8.example:623", Username: "admin", Password: "secret"}
	for _, call := range []func() error{
		func() error { _, err := p.PowerState(context.Background(), target); return err },
		func() error { return p.PowerOff(context.Background(), target) },
	} {
		err := call()
		wantReason(t, err, providers.ReasonUnreachable)
		var dnsErr *net.DNSError
		if !strings.Contains(err.Error(), `"bmc.rack-8.example"`) || !errors.As(err, &dnsErr) {
			t.Errorf("error %q does not name the host and the lookup's error", err)
		}
	}
}
