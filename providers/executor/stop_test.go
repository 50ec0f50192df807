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
		{"ignores it", true, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, executor.OutcomeKilled, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt := &fakeRuntime{state: executor.StateRunning, stubborn: tc.stubborn, failSignals: 2}
			pod := newPod("stop-again", 2, corev1.Container{Name: "app"})
			rep, err := executor.New(rt).Terminate(context.Background(), executor.Request{Pod: pod})
			if err != nil {
				t.Fatal(err)
			}
			rt.wantSignals(t, tc.wantSignals)
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

// TestSIGKILLSentAgain: a SIGKILL the runtime fails to send is sent again, at a growing interval,
// until it is taken, as the kubelet's pod worker tries the kill again at its next sync: the container
// that ignores its stop signal is killed, and the report says what failed. One SIGKILL that never
// goes through fails the container once ExitTimeout has passed, saying so.
func TestSIGKILLSentAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		failKills   int
		wantSignals []syscall.Signal
		wantOutcome executor.Outcome
		wantError   string
	}{
		{"taken at the third try", 2, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, executor.OutcomeKilled, "sending SIGKILL: runtime busy (sent at try 3,"},
		{"never taken", 1 << 20, []syscall.Signal{syscall.SIGTERM}, executor.OutcomeFailed, "sending SIGKILL: runtime busy (not sent in "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt := &fakeRuntime{state: executor.StateRunning, stubborn: true, failKills: tc.failKills}
			pod := newPod("kill-again", 1, corev1.Container{Name: "app"})
			e := executor.New(rt)
			e.ExitTimeout = time.Second
			rep, err := e.Terminate(context.Background(), executor.Request{Pod: pod})
			if err != nil && tc.wantOutcome != executor.OutcomeFailed {
				t.Fatal(err)
			}
			rt.wantSignals(t, tc.wantSignals)
			c := rep.Container("app")
			if c.Outcome != tc.wantOutcome || !strings.Contains(c.Error, tc.wantError) {
				t.Errorf("outcome %s, error %q; want %s saying %q", c.Outcome, c.Error, tc.wantOutcome, tc.wantError)
			}
			// KilledAt is when the runtime took a SIGKILL: after two refusals, at the third try,
			// later than SIGKILL was due; never, when it took none.
			if taken := len(tc.wantSignals) == 2; taken != !c.KilledAt.IsZero() || taken && !c.KilledAt.After(c.KillAt) {
				t.Errorf("KilledAt %v (SIGKILL due %v); want it set, after the due time, only when a SIGKILL was taken", c.KilledAt, c.KillAt)
			}
			if tries := strings.Count(c.Error, "not sent in "); tc.wantOutcome == executor.OutcomeFailed && tries != 1 {
				t.Errorf("error %q: want the SIGKILL tries said once", c.Error)
			}
			// Refused SIGKILLs are tried again at a growing interval, not at every 20 ms poll:
			// about 6 tries in the 1 s before the container fails, not 50.
			rt.mu.Lock()
			refused := tc.failKills - rt.failKills
			rt.mu.Unlock()
			if tc.wantOutcome == executor.OutcomeFailed && (refused < 3 || refused > 12) {
				t.Errorf("%d SIGKILL tries refused in ExitTimeout (1s); want 3-12", refused)
			}
		})
	}
}

// wantSignals checks the signals f sent, in order.
func (f *fakeRuntime) wantSignals(t *testing.T, want []syscall.Signal) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if diff := cmp.Diff(want, f.signals); diff != "" {
		t.Errorf("signals sent (-want +got):\n%s", diff)
	}
}
