package executor

import (
	"testing"
)

// FuzzParseSignal checks the reader of a container's stop signal (the image's STOPSIGNAL or the
// pod's lifecycle.stopSignal): an accepted signal is a real one (1 to 64), its name reads back
// as the same signal; a refused one says why.
func FuzzParseSignal(f *testing.F) {
	for _, s := range []string{"SIGTERM", "TERM", "sigkill", "9", " SIGQUIT ", "SIGRTMIN+3", "RTMIN+3", "SIGRTMAX-1",
		"", "0", "65", "-9", "SIGNOPE", "SIGRTMIN+99", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sig, err := parseSignal(s)
		if err != nil {
			if err.Error() == "" || sig != 0 {
				t.Fatalf("parseSignal(%q) refused with %d, %q", s, sig, err)
			}
			return
		}
		if sig < 1 || sig > 64 {
			t.Fatalf("parseSignal(%q) = %d, not a signal", s, sig)
		}
		back, err := parseSignal(SignalName(sig))
		if err != nil || back != sig {
			t.Fatalf("parseSignal(%q) = %d named %q, which reads back as %d, %v", s, sig, SignalName(sig), back, err)
		}
	})
}
