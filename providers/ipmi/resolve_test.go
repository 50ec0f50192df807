package ipmi

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/test/testbed/ipmisim"
)

// roundRobin is a resolver that answers name with the next of addrs at each lookup, as a
// round-robin DNS name does, and counts its lookups.
type roundRobin struct {
	name  string
	addrs []netip.Addr

	mu      sync.Mutex
	lookups int
}

func (r *roundRobin) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if host != r.name {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	a := r.addrs[r.lookups%len(r.addrs)]
	r.lookups++
	return []netip.Addr{a}, nil
}

func (r *roundRobin) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups
}

// A BMC named by a round-robin DNS name, whose addresses are the node's machine's BMC and
// another machine's: each call resolves the name once, and its ping, identity check and
// ipmitool command all go to that address. The call that resolves to the node's BMC powers the
// node's machine off; the one that resolves to the other machine's is refused by the identity
// check, and that machine gets no command either way.
func TestNameResolvedOncePerCall(t *testing.T) {
	node := startBMCOf(t, ipmisim.Options{Host: "127.0.0.2", GUID: simGUID})
	other := startBMCOf(t, ipmisim.Options{Host: "127.0.0.3", Port: node.Port(), GUID: "0f1e2d3c4b5a69788796a5b4c3d2e1f0"})
	r := &roundRobin{name: "bmc.rack-7.example", addrs: []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")}}
	p := New(nil)
	p.lookup = r.lookup
	target := Target{Node: "node-1", Address: net.JoinHostPort(r.name, strconv.Itoa(node.Port())),
		Username: node.Username(), Password: node.Password(), SystemUUID: "33221100-5544-7766-8899-aabbccddeeff"}

	if err := p.PowerOff(context.Background(), target); err != nil {
		t.Fatalf("PowerOff through the name's first address: %v", err)
	}
	if r.count() != 1 {
		t.Errorf("the call looked the name up %d times, want 1", r.count())
	}
	if poweredOn(t, node) {
		t.Errorf("the node's machine is still on")
	}
	if n := offCommands(t, other); n != 0 || !poweredOn(t, other) {
		t.Fatalf("%d power-off commands reached the other machine (on: %v)", n, poweredOn(t, other))
	}

	// The next lookup gives the other machine's address: refused, whatever the next one gives.
	err := p.PowerOff(context.Background(), target)
	wantReason(t, err, providers.ReasonBadTarget)
	if !strings.Contains(err.Error(), "not the node's machine") {
		t.Errorf("error %q does not say the BMC is not the node's machine", err)
	}
	if r.count() != 2 {
		t.Errorf("two calls looked the name up %d times, want 2", r.count())
	}
	if n := offCommands(t, other); n != 0 || !poweredOn(t, other) {
		t.Fatalf("%d power-off commands reached the other machine (on: %v)", n, poweredOn(t, other))
	}
}

// A name that does not resolve fails the call as Unreachable, naming the name, before any
// datagram is sent.
func TestNameNotResolved(t *testing.T) {
	p := New(nil)
	p.lookup = (&roundRobin{name: "bmc.rack-7.example", addrs: []netip.Addr{netip.MustParseAddr("127.0.0.2")}}).lookup
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

// resolve takes an address as it is (a 4-in-6 address written as such included) and a name as
// its first address, unmapped.
func TestResolve(t *testing.T) {
	p := New(nil)
	p.lookup = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.9"), netip.MustParseAddr("10.0.0.10")}, nil
	}
	for host, want := range map[string]string{
		"10.1.2.3":          "10.1.2.3",
		"fd00::7":           "fd00::7",
		"::ffff:10.1.2.3":   "::ffff:10.1.2.3",
		"bmc-7.example.org": "10.0.0.9",
	} {
		got, err := p.resolve(context.Background(), host)
		if err != nil || got.String() != want {
			t.Errorf("resolve(%q) = %v, %v; want %s", host, got, err, want)
		}
	}
	p.lookup = func(context.Context, string) ([]netip.Addr, error) { return nil, nil }
	if _, err := p.resolve(context.Background(), "bmc-7.example.org"); err == nil || !strings.Contains(err.Error(), "no address") {
		t.Errorf("a name with no address: error %v", err)
	}
}
