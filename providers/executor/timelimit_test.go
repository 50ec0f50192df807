package executor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/providers/executor"
)

// TestSIGKILLAtTimeLimit: when the order's time limit ends the context before a container is
// read back as exited (in its grace period, or in a hook that hangs), the container still gets
// SIGKILL, and the report says so; it is not left running.
func TestSIGKILLAtTimeLimit(t *testing.T) {
	t.Parallel()
	hanging := &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 300}}}
	for _, tc := range []struct {
		name        string
		lifecycle   *corev1.Lifecycle
		wantSignals []syscall.Signal
		// wantNote is what the report says of the stop signal ("" for nothing).
		wantNote string
	}{
		// The stop signal goes before the time limit; SIGKILL would come after 300 s.
		{"stop signal ignored", nil, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, ""},
		// The time limit ends the hook: the stop signal on the ended context reaches nothing,
		// and the report says so.
		{"hook hangs", hanging, []syscall.Signal{syscall.SIGKILL}, "sending SIGTERM: context deadline exceeded (not sent in 1 tries)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt := &fakeRuntime{state: executor.StateRunning, stubborn: true}
			pod := newPod("time-limit", 300, corev1.Container{Name: "app", Lifecycle: tc.lifecycle})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			rep, err := executor.New(rt).Terminate(ctx, executor.Request{Pod: pod})
			if err == nil {
				t.Error("Terminate: no error, want one: the exit was not read back in time")
			}
			rt.mu.Lock()
			signals, state := rt.signals, rt.state
			rt.mu.Unlock()
			if diff := cmp.Diff(tc.wantSignals, signals); diff != "" {
				t.Errorf("signals sent (-want +got):\n%s", diff)
			}
			if state != executor.StateExited {
				t.Errorf("container %s after the time limit, want exited", state)
			}
			c := rep.Container("app")
			if c.Outcome != executor.OutcomeFailed || c.KilledAt.IsZero() || !strings.Contains(c.Error, "SIGKILL sent at the time limit") {
				t.Errorf("report = %+v, want failed, with SIGKILL sent at the time limit", c)
			}
			if says := strings.Contains(c.Error, "sending SIGTERM"); says != (tc.wantNote != "") || !strings.Contains(c.Error, tc.wantNote) {
				t.Errorf("report error %q; want it to say %q of the stop signal", c.Error, tc.wantNote)
			}
		})
	}
}

// TestGraceWithin: the grace period left by a time limit keeps room for SIGKILL (up to 2 s
// after the grace period, and a second's margin) and the exit's read-back, in whole seconds,
// never below 0.
func TestGraceWithin(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		left, exitTimeout time.Duration
		want              int64
	}{
		{120 * s, 10 * s, 107},
		{120*s + 900*time.Millisecond, 10 * s, 107},
		{20 * s, 200 * time.Millisecond, 16},
		{14 * s, 10 * s, 1},
		{13 * s, 10 * s, 0},
		{5 * s, 10 * s, 0},
		{-s, 10 * s, 0},
	} {
		if got := executor.GraceWithinLeft(tc.left, tc.exitTimeout); got != tc.want {
			t.Errorf("%v left, exit timeout %v: grace %d, want %d", tc.left, tc.exitTimeout, got, tc.want)
		}
	}
}

// A stop signal the executor cannot read (the image's lookup fails) or parse (an image's
// STOPSIGNAL no kernel knows) is said in the container's report, with the signal sent instead
// (SIGTERM): the termination goes on, but not silently as if the image had named none.
func TestStopSignalProblemsReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rt   *fakeRuntime
		says string
	}{
		{"unreadable", &fakeRuntime{state: executor.StateRunning, imageErr: errors.New("image gone")}, "reading the image's stop signal: image gone"},
		{"unparsable", &fakeRuntime{state: executor.StateRunning, imageSignal: "SIGNOPE"}, `parsing stop signal "SIGNOPE"`},
	} {
		rep, err := executor.New(tc.rt).Terminate(context.Background(), executor.Request{Pod: newPod("signals", 30, corev1.Container{Name: "app"})})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c := rep.Container("app")
		if c.Signal != "SIGTERM" || !strings.Contains(c.Error, tc.says) || c.Outcome != executor.OutcomeExited {
			t.Errorf("%s: signal %s, outcome %s, error %q; want SIGTERM sent, the container exited, and the error saying %q", tc.name, c.Signal, c.Outcome, c.Error, tc.says)
		}
		if strings.HasSuffix(c.Error, "; ") || strings.Contains(c.Error, "; ;") {
			t.Errorf("%s: error %q carries an empty note", tc.name, c.Error)
		}
	}
	rt := &fakeRuntime{state: executor.StateRunning, imageErr: errors.New("image gone")}
	_, _ = executor.New(rt).Terminate(context.Background(), executor.Request{Pod: newPod("signals", 30, corev1.Container{Name: "app"})})
	if rt.imageReads != 3 {
		t.Errorf("an image's stop signal that cannot be read was read %d times, want 3 (two more tries)", rt.imageReads)
	}
	// Of a container gone meanwhile, once; of one whose spec names its stop signal, never.
	rt = &fakeRuntime{state: executor.StateRunning, imageErr: fmt.Errorf("loading container: %w", executor.ErrNotFound)}
	_, _ = executor.New(rt).Terminate(context.Background(), executor.Request{Pod: newPod("signals", 30, corev1.Container{Name: "app"})})
	if rt.imageReads != 1 {
		t.Errorf("the image's stop signal of a container gone was read %d times, want 1", rt.imageReads)
	}
	rt = &fakeRuntime{state: executor.StateRunning, imageErr: errors.New("image gone")}
	rep, err := executor.New(rt).Terminate(context.Background(), executor.Request{Pod: newPod("signals", 30,
		corev1.Container{Name: "app", Lifecycle: &corev1.Lifecycle{StopSignal: ptr.To(corev1.SIGINT)}})})
	if c := rep.Container("app"); err != nil || c.Signal != "SIGINT" || c.Error != "" || rt.imageReads != 0 {
		t.Errorf("lifecycle.stopSignal SIGINT: signal %s, error %q, %d reads of the image (%v); want SIGINT, no error, no read", c.Signal, c.Error, rt.imageReads, err)
	}
}

// A read of the image's stop signal that fails for a moment is tried again: the container gets
// its image's signal, not the default, and its report says nothing went wrong.
func TestImageStopSignalReadAgain(t *testing.T) {
	t.Parallel()
	rt := &fakeRuntime{state: executor.StateRunning, imageSignal: "SIGINT", failImage: 2}
	rep, err := executor.New(rt).Terminate(context.Background(), executor.Request{Pod: newPod("signals", 30, corev1.Container{Name: "app"})})
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Container("app"); c.Signal != "SIGINT" || c.Error != "" || rt.imageReads != 3 {
		t.Errorf("signal %s, error %q after %d reads; want the image's SIGINT on the third read, no error", c.Signal, c.Error, rt.imageReads)
	}
}
