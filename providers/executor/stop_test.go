package executor_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"palisade.dev/palisade/providers/executor"
)

// TestStopSignalSentAgain: a stop signal the runtime fails to send is sent again until it is
// taken, as the kubelet's pod worker tries the kill again, and never again once taken; SIGKILL
// still comes at the grace period's end counted from the first try, and the report says what
// failed.
func TestStopSignalSentAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		stubborn    bool
		wantSignals []syscall.Signal
		wantOutcome executor.Outcome
		maxTook     time.Duration
	}{
		{"exits on it", false, []syscall.Signal{syscall.SIGTERM}, executor.OutcomeExited, time.Second},
		{"ignores it", true, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, executor.OutcomeExited, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt := &fakeRuntime{state: executor.StateRunning, stubborn: tc.stubborn, failSignals: 2}
			pod := newPod("stop-again", 2, corev1.Container{Name: "app"})
			rep, err := executor.New(rt).Terminate(context.Background(), executor.Request{Pod: pod})
			if err != nil {
				t.Fatal(err)
			}
			rt.mu.Lock()
			signals := rt.signals
			rt.mu.Unlock()
			if diff := cmp.Diff(tc.wantSignals, signals); diff != "" {
				t.Errorf("signals sent (-want +got):\n%s", diff)
			}
			c := rep.Container("app")
			if took := c.ExitedAt.Sub(c.SignalledAt); c.Outcome != tc.wantOutcome || took > tc.maxTook {
				t.Errorf("outcome %s %v after the first try, want %s within %v", c.Outcome, took, tc.wantOutcome, tc.maxTook)
			}
			if due := c.KillAt.Sub(c.SignalledAt); due != 2*time.Second {
				t.Errorf("SIGKILL due %v after the first try, want the grace period, 2s", due)
			}
			if !strings.Contains(c.Error, "sending SIGTERM: runtime busy (sent at try 3,") {
				t.Errorf("report error %q, want it to say SIGTERM failed twice and was sent at try 3", c.Error)
			}
		})
	}
}
