package executor

import (
	"syscall"
	"testing"
)

// An image's STOPSIGNAL is outside input (whoever built the image chose it): an accepted one is
// a real signal (1–64), and its name reads back as the same signal.
func FuzzParseSignal(f *testing.F) {
	for _, s := range []string{"SIGTERM", "TERM", "15", "SIGRTMIN+3", "RTMIN+3", "SIGRTMAX", "SIGKILL", " SIGUSR2 ", "", "0", "65", "-1", "SIGFOO", "RTMIN+99"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sig, err := parseSignal(s)
		if err != nil {
			if sig != 0 {
				t.Fatalf("parseSignal(%q) failed (%v) with signal %d", s, err, sig)
			}
			return
		}
		if sig < 1 || sig > 64 {
			t.Fatalf("parseSignal(%q) = %d, not a signal", s, sig)
		}
		again, err := parseSignal(SignalName(sig))
		if err != nil || again != sig {
			t.Fatalf("parseSignal(SignalName(%d) = %q) = %d, %v", sig, SignalName(sig), again, err)
		}
		_ = syscall.Signal(sig)
	})
}
