package ipmi

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// FuzzParsePowerState checks the reader of a BMC's power answer: whatever the BMC says, the
// answer is on, off or unknown, on and off only when the last word says so, and the same
// answer always reads the same.
func FuzzParsePowerState(f *testing.F) {
	for _, s := range []string{"Chassis Power is on", "Chassis Power is off", "on", "Off", "ON\n", "",
		"Chassis Power is unknown", "Error: Unable to establish IPMI v2 / RMCP+ session", "on off", "oN\t", "\u00a0on"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := parsePowerState(s)
		if again := parsePowerState(s); again != got {
			t.Fatalf("parsePowerState(%q) is not deterministic: %v then %v", s, got, again)
		}
		fields := strings.Fields(strings.ToLower(s))
		last := ""
		if len(fields) > 0 {
			last = fields[len(fields)-1]
		}
		want := PowerUnknown
		switch last {
		case "on":
			want = PowerOn
		case "off":
			want = PowerOff
		}
		if got != want {
			t.Fatalf("parsePowerState(%q) = %v, want %v", s, got, want)
		}
	})
}

// FuzzSplitAddress checks the reader of a node's BMC address annotation, which reaches
// ipmitool's command line: an accepted host is not empty, cannot pass for a flag, holds no
// space, slash or '@', and its port is 1 to 65535; a refused address says why.
func FuzzSplitAddress(f *testing.F) {
	for _, s := range []string{"10.0.0.5", "10.0.0.5:6230", "bmc.rack7", "[fd00::5]:623", "fd00::5", "  10.0.0.5  ",
		"", ":623", "10.0.0.5:0", "10.0.0.5:65536", "-H", "-Hevil:623", "a b", "user@host", "host/path", "[::1", "fd00::zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		host, port, err := splitAddress(addr)
		if err != nil {
			if err.Error() == "" || host != "" || port != "" {
				t.Fatalf("splitAddress(%q) refused with %q, %q, %q", addr, host, port, err)
			}
			return
		}
		n, perr := strconv.Atoi(port)
		if perr != nil || n < 1 || n > 65535 {
			t.Fatalf("splitAddress(%q) accepted port %q", addr, port)
		}
		if host == "" || strings.HasPrefix(host, "-") || strings.ContainsAny(host, " \t\n/@") {
			t.Fatalf("splitAddress(%q) accepted host %q", addr, host)
		}
		h2, p2, err := splitAddress(net.JoinHostPort(host, port))
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("splitAddress(%q) = %q, %q; joined again it reads %q, %q, %v", addr, host, port, h2, p2, err)
		}
	})
}
