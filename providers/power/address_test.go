package power

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// ResolveBMC takes an address as it is (a 4-in-6 address written as such included) and a name
// as its first address, unmapped, saying which came from a name; a name with no address, or whose lookup fails, is an error
// naming it.
func TestResolveBMC(t *testing.T) {
	lookup := func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.9"), netip.MustParseAddr("10.0.0.10")}, nil
	}
	for host, want := range map[string]struct {
		ip    string
		named bool
	}{
		"10.1.2.3":          {"10.1.2.3", false},
		"fd00::7":           {"fd00::7", false},
		"::ffff:10.1.2.3":   {"::ffff:10.1.2.3", false},
		"bmc-7.example.org": {"10.0.0.9", true},
	} {
		got, named, err := ResolveBMC(context.Background(), lookup, host)
		if err != nil || got.String() != want.ip || named != want.named {
			t.Errorf("ResolveBMC(%q) = %v, %v, %v; want %s, %v", host, got, named, err, want.ip, want.named)
		}
	}
	none := func(context.Context, string) ([]netip.Addr, error) { return nil, nil }
	if _, _, err := ResolveBMC(context.Background(), none, "bmc-7.example.org"); err == nil || !strings.Contains(err.Error(), `"bmc-7.example.org" resolves to no address`) {
		t.Errorf("a name with no address: error %v", err)
	}
	errLookup := errors.New("server misbehaving")
	failing := func(context.Context, string) ([]netip.Addr, error) { return nil, errLookup }
	if _, _, err := ResolveBMC(context.Background(), failing, "bmc-7.example.org"); !errors.Is(err, errLookup) || !strings.Contains(err.Error(), `"bmc-7.example.org"`) {
		t.Errorf("a failed lookup: error %v", err)
	}
}
