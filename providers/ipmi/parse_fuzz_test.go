package ipmi

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// FuzzParsePowerState checks the reader of a BMC's power answer: whatever the BMC says, the
// answer is on, off or unknown; on or off only when exactly one line, trimmed and in any case,
// is that state's status line and no other line speaks of the chassis power; a status line
// added for the other state never leaves a confirmation; the same answer always reads the
// same. The corpus under testdata/fuzz/FuzzParsePowerState holds the outputs that once read
// wrong (a warning ending in "off" after "Chassis Power is on").
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
		var on, off, other int
		for _, line := range strings.Split(s, "\n") {
			line = strings.TrimSpace(line)
			switch {
			case strings.EqualFold(line, "Chassis Power is on"):
				on++
			case strings.EqualFold(line, "Chassis Power is off"):
				off++
			case strings.Contains(strings.ToLower(line), "chassis power is"):
				other++
			}
		}
		want := PowerUnknown
		switch {
		case on == 1 && off == 0 && other == 0:
			want = PowerOn
		case off == 1 && on == 0 && other == 0:
			want = PowerOff
		}
		if got != want {
			t.Fatalf("parsePowerState(%q) = %v, want %v (%d on, %d off, %d other status lines)", s, got, want, on, off, other)
		}
		if got := parsePowerState(s + "\nChassis Power is on"); got == PowerOff {
			t.Fatalf("parsePowerState(%q) with a line saying on added reads Off", s)
		}
		if got := parsePowerState("Chassis Power is off\n" + s); got == PowerOn {
			t.Fatalf("parsePowerState(%q) with a line saying off added reads On", s)
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
