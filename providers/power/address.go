package power

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/go-logr/logr"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
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
	if _, err := netip.ParseAddr(host); err != nil && numeric(host) {
		return "", "", fmt.Errorf("BMC host %q in %q is not an IPv4 address written as four decimal numbers without leading zeros, and no host name: resolvers read such forms differently (010 as octal 8, 10.1 as 10.0.0.1), so write the address out", host, addr)
	}
	return host, port, nil
}

// numeric says whether every dot-separated label of host is a decimal or 0x-hex number: an
// IPv4 address in one of inet_aton's forms ("10.1", "010.0.0.1", "0x0a.0.0.1", "167772161"),
// never a host name, whose top-level label is not a number.
func numeric(host string) bool {
	for _, label := range strings.Split(host, ".") {
		digits := label
		if l := strings.ToLower(label); strings.HasPrefix(l, "0x") {
			digits = l[2:]
		}
		if digits == "" || strings.TrimLeft(strings.ToLower(digits), "0123456789abcdef") != "" ||
			(digits == label && strings.TrimLeft(label, "0123456789") != "") {
			return false
		}
	}
	return true
}

// spaceOrControl is a character no host name or address holds (a vertical tab once got
// through: FuzzSplitAddress).
func spaceOrControl(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

// Lookup resolves a host name to its addresses.
type Lookup func(ctx context.Context, host string) ([]netip.Addr, error)

// SystemLookup is the system's resolver (net.DefaultResolver), an IPv6 address's zone kept
// (a link-local BMC in /etc/hosts).
func SystemLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	ips := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			ips = append(ips, ip.Unmap().WithZone(a.Zone))
		}
	}
	return ips, nil
}

// ResolveBMC gives the one address a provider's call talks to: host itself when it is an IP
// address, else the first address lookup gives for the name (the one ipmitool and Go's dialer
// would take); named says it came from a name. Everything the call sends then goes to that
// address: were the name resolved anew by each of its steps, a round-robin name, or one whose
// record changed between the lookups, could have the identity check ask one machine while the
// power command goes to another. Two calls may still reach two machines: a provider checks the
// identity of a named BMC on reads as well, where it can be compared, so that a read-back does
// not read another machine.
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

// NamedBMCNote is what a refusal of a BMC reached through a host name adds to its error: the
// address the name resolved to for the call, and that a name whose addresses reach several
// machines' BMCs names no one BMC.
func NamedBMCNote(host string, ip netip.Addr) string {
	return fmt.Sprintf(" (%s resolved to %s for this call: if the name resolves to several machines' BMCs, set %s to the node's own BMC's address)",
		host, ip, v1alpha1.AnnotationBMCAddress)
}

// ResolveCall is ResolveBMC for one call of a provider, begun at start: a name that does not
// resolve is logged at V(1) and fails as ReasonUnreachable, its error led by what the call does
// ("powering off node n1 (bmc-7:623)"); a name's address joins log as resolvedAddress.
func ResolveCall(ctx context.Context, lookup Lookup, host, what string, log logr.Logger, start time.Time) (ip netip.Addr, named bool, _ logr.Logger, err error) {
	ip, named, err = ResolveBMC(ctx, lookup, host)
	if err != nil {
		log.V(1).Info("BMC address not resolved", "duration", time.Since(start), "error", err.Error())
		return ip, named, log, providers.NewError(providers.ReasonUnreachable, fmt.Errorf("%s: %w", what, err))
	}
	if host != ip.String() {
		log = log.WithValues("resolvedAddress", ip.String())
	}
	return ip, named, log, nil
}
