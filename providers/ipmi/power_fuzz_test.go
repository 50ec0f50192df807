package ipmi

import (
	"strings"
	"testing"
)

// A BMC's power answer is outside input (a BMC can answer anything). Properties: case and
// surrounding space do not matter; an answer with no word "on" or "off" is PowerUnknown, never
// On or Off by accident; a known state is the answer's last word, so text before it does not
// change it, and a word after it other than on/off makes it unknown.
func FuzzParsePowerState(f *testing.F) {
	for _, s := range []string{"Chassis Power is on", "Chassis Power is off", "on", "Off", "", "   ", "on off", "Chassis Power is unknown",
		"power: on\n", "offline", "ON\t", "Chassis Power is on!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := parsePowerState(s)
		if other := parsePowerState("  " + strings.ToUpper(s) + "\n"); other != got {
			t.Fatalf("case or space changed the reading of %q: %v, %v", s, got, other)
		}
		words := strings.Fields(strings.ToLower(s))
		hasWord := func(w string) bool {
			for _, x := range words {
				if x == w {
					return true
				}
			}
			return false
		}
		switch got {
		case PowerOn, PowerOff:
			if !hasWord(strings.ToLower(string(got))) {
				t.Fatalf("parsePowerState(%q) = %v, a word the answer does not hold", s, got)
			}
			if again := parsePowerState("Chassis Power is " + s); again != got {
				t.Fatalf("a prefix changed the reading of %q: %v, %v", s, got, again)
			}
			if again := parsePowerState(s + " maybe"); again != PowerUnknown {
				t.Fatalf("%q then another word read as %v", s, again)
			}
		case PowerUnknown:
			if len(words) > 0 && (words[len(words)-1] == "on" || words[len(words)-1] == "off") {
				t.Fatalf("parsePowerState(%q) is unknown though it ends in %q", s, words[len(words)-1])
			}
		default:
			t.Fatalf("parsePowerState(%q) = %v, no state at all", s, got)
		}
	})
}
