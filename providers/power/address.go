package power

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
)

// SplitAddress splits a BMC address, "host", "host:port", "[v6]:port" or a bare IPv6
// address, into host and port (defaultPort when it names none), refusing what no host holds.
func SplitAddress(addr, defaultPort string) (host, port string, err error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return "", "", errors.New("empty BMC address")
	}
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		host, port = strings.Trim(addr, "[]"), defaultPort
		if strings.Contains(host, ":") && net.ParseIP(host) == nil {
			return "", "", fmt.Errorf("malformed BMC address %q", addr)
		}
	}
	if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("malformed BMC port in %q", addr)
	}
	if host == "" || strings.HasPrefix(host, "-") || strings.ContainsAny(host, "/@[]") || strings.IndexFunc(host, spaceOrControl) >= 0 ||
		(strings.Contains(host, ":") && net.ParseIP(host) == nil) {
		return "", "", fmt.Errorf("malformed BMC host in %q", addr)
	}
	return host, port, nil
}

// spaceOrControl is a character no host name or address holds (a vertical tab once got
// through: FuzzSplitAddress).
func spaceOrControl(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

// Lookup resolves a host name to its addresses.
type Lookup func(ctx context.Context, host string) ([]netip.Addr, error)

// SystemLookup is the system's resolver (net.DefaultResolver).
func SystemLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// ResolveBMC gives the one address a provider's call talks to: host itself when it is an IP
// address, else the first address lookup gives for the name (the one ipmitool and Go's dialer
// would take); named says it came from a name. Everything the call sends then goes to that
// address: were the name resolved anew by each of its steps, a round-robin name, or one whose
// record changed between the lookups, could have the identity check ask one machine while the
// power command goes to another. Two calls may still reach two machines: a provider checks the
// identity of a named BMC on reads as well, so that a read-back never reads another machine.
func ResolveBMC(ctx context.Context, lookup Lookup, host string) (ip netip.Addr, named bool, err error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, false, nil
	}
	ips, err := lookup(ctx, host)
	if err != nil {
		return netip.Addr{}, true, fmt.Errorf("resolving BMC host %q: %w", host, err)
	}
	if len(ips) == 0 {
		return netip.Addr{}, true, fmt.Errorf("BMC host %q resolves to no address", host)
	}
	return ips[0].Unmap(), true, nil
}
