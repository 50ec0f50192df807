package power

import (
	"errors"
	"fmt"
	"net"
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
