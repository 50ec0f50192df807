package node

import (
	"strconv"
	"testing"
)

// FuzzParseSeconds checks the reader of the grace periods the kubelet leaves in a container's
// labels: a number reads back as itself, anything else as absent.
func FuzzParseSeconds(f *testing.F) {
	for _, s := range []string{"30", "0", "-1", "", " 30", "30s", "1e3", "9223372036854775807", "9223372036854775808", "+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := parseSeconds(s)
		n, err := strconv.ParseInt(s, 10, 64)
		switch {
		case err != nil && got != nil:
			t.Fatalf("parseSeconds(%q) = %d, want absent", s, *got)
		case err == nil && (got == nil || *got != n):
			t.Fatalf("parseSeconds(%q) = %v, want %d", s, got, n)
		case got != nil && parseSeconds(strconv.FormatInt(*got, 10)) == nil:
			t.Fatalf("parseSeconds(%q) = %d does not read back", s, *got)
		}
	})
}
