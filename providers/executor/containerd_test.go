package executor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/providers/executor"
	"palisade.dev/palisade/test/testbed/containerd"
)

// TestTermThenKillAtGrace: a container that traps TERM and ignores it gets SIGTERM, then
// SIGKILL when the grace period ends, as seen by the container itself.
func TestTermThenKillAtGrace(t *testing.T) {
	t.Parallel()
	pod := newPod("term-kill", 3, ctr("stubborn", ""))
	dir := runPod(t, pod)
	rep := terminate(t, executor.Request{Pod: pod})
	evs := containerd.MustReadEvents(t, dir, "stubborn")
	term := containerd.EventAt(t, evs, "stubborn", "TERM")
	assertNear(t, "TERM to death (grace 3s)", evs.Last()-term, 3*time.Second)
	c := rep.Container("stubborn")
	if c.Outcome != executor.OutcomeKilled || c.ExitCode != 137 || c.Signal != "SIGTERM" || c.SignalSource != executor.SignalDefault {
		t.Errorf("report = %+v, want killed by SIGKILL after the default SIGTERM", c)
	}
	if rep.Confirmed.IsZero() || !rep.SandboxesStopped {
		t.Errorf("report not confirmed: %+v", rep)
	}
	time.Sleep(500 * time.Millisecond) // nothing restarts it: read it back again
	if err := executor.New(bed.rt).Confirm(context.Background(), string(pod.UID)); err != nil {
		t.Errorf("confirming again: %v", err)
	}
}

// TestStopSignals: lifecycle.stopSignal first, then the image's STOPSIGNAL, then SIGTERM.
func TestStopSignals(t *testing.T) {
	t.Parallel()
	lifecycle := ctr("lifecycle", "TERM USR1 USR2")
	lifecycle.Image = usr2Image
	lifecycle.Lifecycle = &corev1.Lifecycle{StopSignal: ptr.To(corev1.SIGUSR1)}
	image := ctr("image", "TERM USR1 USR2")
	image.Image = usr2Image
	pod := newPod("signals", 10, lifecycle, image, ctr("default", "TERM USR1 USR2"))
	dir := runPod(t, pod)
	rep := terminate(t, executor.Request{Pod: pod})
	for _, tc := range []struct {
		container, event, signal string
		source                   executor.SignalSource
	}{
		{"lifecycle", "USR1", "SIGUSR1", executor.SignalFromLifecycle},
		{"image", "USR2", "SIGUSR2", executor.SignalFromImage},
		{"default", "TERM", "SIGTERM", executor.SignalDefault},
	} {
		evs := containerd.MustReadEvents(t, dir, tc.container)
		if !evs.Has(tc.event) || !evs.Has("exit") {
			t.Errorf("container %s saw %s, want %s then exit", tc.container, evs, tc.event)
		}
		c := rep.Container(tc.container)
		if c.Signal != tc.signal || c.SignalSource != tc.source || c.Outcome != executor.OutcomeExited || c.ExitCode != 0 {
			t.Errorf("report of %s = %+v, want %s from %s, exited 0 on its own", tc.container, c, tc.signal, tc.source)
		}
	}
}

// TestStopSignalOfTheImageRun: the image's STOPSIGNAL is that of the image the container was
// created from, as the CRI recorded it and the kubelet's stop sends it, after the image's name
// was given to another image with another STOPSIGNAL (a tag pulled again).
func TestStopSignalOfTheImageRun(t *testing.T) {
	t.Parallel()
	const name = "palisade.test/events:moved"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bed.ctd.ImportImage(ctx, containerd.Image{Name: name, Cmd: containerd.EventCommand, StopSignal: "SIGUSR2"}); err != nil {
		t.Fatal(err)
	}
	moved := ctr("moved", "TERM USR1 USR2")
	moved.Image = name
	pod := newPod("moved-tag", 10, moved)
	dir := runPod(t, pod)
	before := imageDigest(ctx, t, name)
	if err := bed.ctd.ImportImage(ctx, containerd.Image{Name: name, Cmd: containerd.EventCommand, StopSignal: "SIGUSR1"}); err != nil {
		t.Fatal(err)
	}
	if after := imageDigest(ctx, t, name); after == before {
		t.Fatalf("the name %s still names the first image (%s)", name, before)
	}
	rep := terminate(t, executor.Request{Pod: pod})
	evs := containerd.MustReadEvents(t, dir, "moved")
	if !evs.Has("USR2") || evs.Has("USR1") || !evs.Has("exit") {
		t.Errorf("the container saw %s, want USR2 (its image's STOPSIGNAL when it was created) then exit", evs)
	}
	if c := rep.Container("moved"); c.Signal != "SIGUSR2" || c.SignalSource != executor.SignalFromImage {
		t.Errorf("report = %+v, want SIGUSR2 from the image", c)
	}
}

// imageDigest is the digest of the image the name names in containerd.
func imageDigest(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	out, err := bed.ctd.Ctr(ctx, "images", "ls", "name=="+name)
	if err != nil {
		t.Fatalf("listing image %s: %v", name, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == name {
			return f[2]
		}
	}
	t.Fatalf("image %s not listed:\n%s", name, out)
	return ""
}

// TestCRIStopSignal: the CRI's record is read in the version the CRI writes; anything else is
// not taken for it (the image is read instead).
func TestCRIStopSignal(t *testing.T) {
	for _, tc := range []struct {
		data   string
		signal string
		ok     bool
	}{
		{`{"Version":"v1","Metadata":{"ID":"c1","StopSignal":"SIGQUIT","ImageRef":"sha256:ab"}}`, "SIGQUIT", true},
		{`{"Version":"v1","Metadata":{"ID":"c1","ImageRef":"sha256:ab"}}`, "", true},
		{`{"Version":"v2","Metadata":{"StopSignal":"SIGQUIT"}}`, "", false},
		{`{"Metadata":{"StopSignal":"SIGQUIT"}}`, "", false},
		{`not json`, "", false},
		{``, "", false},
	} {
		sig, ok := executor.CRIStopSignal([]byte(tc.data))
		if sig != tc.signal || ok != tc.ok {
			t.Errorf("criStopSignal(%q) = %q, %t; want %q, %t", tc.data, sig, ok, tc.signal, tc.ok)
		}
	}
}

// TestPreStopTakenFromGrace: a 3 s preStop hook with a 5 s grace period: TERM at ~3 s, KILL
// at ~5 s, counted from the hook's start as the container saw it.
func TestPreStopTakenFromGrace(t *testing.T) {
	t.Parallel()
	pod := newPod("prestop", 5, withPreStop(ctr("app", ""), 3*time.Second))
	dir := runPod(t, pod)
	rep := terminate(t, executor.Request{Pod: pod})
	evs := containerd.MustReadEvents(t, dir, "app")
	start := containerd.EventAt(t, evs, "app", "prestop")
	assertNear(t, "preStop start to TERM (hook 3s, grace 5s)", containerd.EventAt(t, evs, "app", "TERM")-start, 3*time.Second)
	assertNear(t, "preStop start to death (grace 5s)", evs.Last()-start, 5*time.Second)
	if c := rep.Container("app"); c.PreStop == nil || !c.PreStop.Completed || c.Outcome != executor.OutcomeKilled {
		t.Errorf("report = %+v, want a completed hook and a kill", c)
	}
}

// TestPreStopWholeSecondsTaken: the kubelet takes a hook's run from the grace period in whole
// seconds, truncated, so a hook of 2.75 s with a 6 s grace period leaves 4 s from TERM to
// SIGKILL, not 3.25 s. The expectation is computed from the hook's run as the executor
// measured it, so a slow exec on a loaded machine changes the figures, not the verdict.
func TestPreStopWholeSecondsTaken(t *testing.T) {
	t.Parallel()
	pod := newPod("prestop-fraction", 6, withPreStop(ctr("app", ""), 2750*time.Millisecond))
	dir := runPod(t, pod)
	rep := terminate(t, executor.Request{Pod: pod})
	c := rep.Container("app")
	if c.PreStop == nil || !c.PreStop.Completed || c.Outcome != executor.OutcomeKilled {
		t.Fatalf("report = %+v, want a completed hook and a kill", c)
	}
	hook := c.PreStop.Ended.Sub(c.PreStop.Started)
	want := max(6*time.Second-hook.Truncate(time.Second), executor.MinimumGracePeriod)
	if got := c.KillAt.Sub(c.SignalledAt); got != want {
		t.Errorf("SIGKILL due %v after the stop signal, want %v (6 s less the hook's %v in whole seconds)", got, want, hook)
	}
	evs := containerd.MustReadEvents(t, dir, "app")
	assertNear(t, fmt.Sprintf("TERM to death (grace 6s, hook %.2fs)", hook.Seconds()), evs.Last()-containerd.EventAt(t, evs, "app", "TERM"), want)
}

// TestMinimumGrace: a grace period of 0 or 1 s still gives 2 s between TERM and KILL.
func TestMinimumGrace(t *testing.T) {
	t.Parallel()
	for _, grace := range []int64{0, 1} {
		t.Run(map[int64]string{0: "zero", 1: "one"}[grace], func(t *testing.T) {
			t.Parallel()
			pod := newPod(map[int64]string{0: "min-zero", 1: "min-one"}[grace], 30, ctr("app", ""))
			pod.DeletionGracePeriodSeconds = ptr.To(grace)
			dir := runPod(t, pod)
			terminate(t, executor.Request{Pod: pod})
			evs := containerd.MustReadEvents(t, dir, "app")
			assertNear(t, "TERM to death (grace ≤1s)", evs.Last()-containerd.EventAt(t, evs, "app", "TERM"), 2*time.Second)
		})
	}
}

// TestPreStopExtension: a preStop hook still running when the 3 s grace period expires: the
// stop signal goes at expiry and SIGKILL 2 s later, once.
func TestPreStopExtension(t *testing.T) {
	t.Parallel()
	pod := newPod("extension", 3, withPreStop(ctr("app", ""), 30*time.Second))
	dir := runPod(t, pod)
	rep := terminate(t, executor.Request{Pod: pod})
	evs := containerd.MustReadEvents(t, dir, "app")
	start := containerd.EventAt(t, evs, "app", "prestop")
	assertNear(t, "preStop start to TERM (hook 30s, grace 3s)", containerd.EventAt(t, evs, "app", "TERM")-start, 3*time.Second)
	assertNear(t, "preStop start to death (grace 3s + 2s)", evs.Last()-start, 5*time.Second)
	if evs.Has("prestop-done") {
		t.Errorf("the hook completed: %s", evs)
	}
	if c := rep.Container("app"); c.PreStop == nil || c.PreStop.Completed {
		t.Errorf("report = %+v, want a hook cut short", c)
	}
}

// TestGraceOnlyShortens: a longer grace period is refused, a shorter one counts from when it
// was given.
func TestGraceOnlyShortens(t *testing.T) {
	t.Parallel()
	pod := newPod("shorten", 30, ctr("app", ""))
	dir := runPod(t, pod)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	term, err := executor.New(bed.rt).Start(ctx, executor.Request{Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	if term.Shorten(60) {
		t.Error("Shorten(60) on a 30 s grace period was accepted")
	}
	containerd.WaitForEvent(t, dir, "app", "TERM")
	time.Sleep(time.Second)
	if !term.Shorten(2) {
		t.Error("Shorten(2) was refused")
	}
	if term.Shorten(5) {
		t.Error("Shorten(5) after Shorten(2) was accepted")
	}
	rep, err := term.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	evs := containerd.MustReadEvents(t, dir, "app")
	assertNear(t, "TERM to death (30s, shortened to 2s after 1s)", evs.Last()-containerd.EventAt(t, evs, "app", "TERM"), 3*time.Second)
	if rep.GracePeriodSeconds != 2 {
		t.Errorf("grace period = %d, want 2", rep.GracePeriodSeconds)
	}
}

// TestLivenessProbeKill: a liveness probe's kill stops that container only, with the probe's
// own grace period, and leaves the pod's other containers and its sandbox running.
func TestLivenessProbeKill(t *testing.T) {
	t.Parallel()
	app := ctr("app", "")
	app.LivenessProbe = &corev1.Probe{TerminationGracePeriodSeconds: ptr.To[int64](2)}
	pod := newPod("probe", 30, app, ctr("other", "TERM"))
	dir := runPod(t, pod)
	rep := terminate(t, executor.Request{Pod: pod, Reason: executor.ReasonLivenessProbe, Container: "app"})
	evs := containerd.MustReadEvents(t, dir, "app")
	assertNear(t, "TERM to death (probe grace 2s, pod 30s)", evs.Last()-containerd.EventAt(t, evs, "app", "TERM"), 2*time.Second)
	if len(rep.Containers) != 1 || rep.SandboxesStopped || rep.GracePeriodSeconds != 2 {
		t.Errorf("report = %+v, want app alone stopped with a 2 s grace, sandbox left", rep)
	}
	containerd.WaitForEvent(t, dir, "other", "tick")
	before := containerd.MustReadEvents(t, dir, "other").Last()
	time.Sleep(200 * time.Millisecond)
	if other := containerd.MustReadEvents(t, dir, "other"); other.Has("TERM") || other.Last() <= before {
		t.Errorf("the other container was disturbed: %s", other)
	}
}

// TestKilledWithinTimeLimit: containers that trap TERM, in a pod with a 300 s grace period,
// terminated under a time limit. With the grace period capped as the node side caps it
// (GraceWithin), the container is killed and read back as exited before the limit. Without
// the cap, the limit ends the termination first: the main container (in its grace period) and
// its sidecar (waiting for its turn) still get SIGKILL then, and are read back dead just after.
func TestKilledWithinTimeLimit(t *testing.T) {
	t.Parallel()
	t.Run("capped", func(t *testing.T) {
		t.Parallel()
		pod := newPod("limit-capped", 300, ctr("app", ""))
		runPod(t, pod)
		ctx, cancel := context.WithTimeout(context.Background(), 16*time.Second)
		defer cancel()
		limit, _ := ctx.Deadline()
		ex := executor.New(bed.rt)
		grace, _ := ex.GraceWithin(ctx)
		pod.DeletionGracePeriodSeconds = &grace
		rep, err := ex.Terminate(ctx, executor.Request{Pod: pod})
		if err != nil {
			t.Fatalf("terminating: %v\n%v", err, rep)
		}
		t.Logf("grace %d s; report:\n%s", grace, rep)
		if c := rep.Container("app"); c.Outcome != executor.OutcomeKilled || !c.ExitedAt.Before(limit) || !rep.Confirmed.Before(limit) {
			t.Errorf("report = %+v, want killed and read back before the limit %s", c, limit)
		}
	})
	t.Run("at the limit", func(t *testing.T) {
		t.Parallel()
		pod := newPod("limit-reached", 300, ctr("main", ""))
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, sidecar(ctr("proxy", "")))
		dir := runPod(t, pod)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		rep, err := executor.New(bed.rt).Terminate(ctx, executor.Request{Pod: pod})
		t.Logf("error: %v; report:\n%s", err, rep)
		if err == nil {
			t.Error("Terminate: no error, want one: the exit was not read back in time")
		}
		for _, name := range []string{"main", "proxy"} {
			if c := rep.Container(name); c == nil || c.KilledAt.IsZero() {
				t.Errorf("report of %s = %+v, want SIGKILL sent", name, c)
			}
		}
		var confirmErr error
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if confirmErr = executor.New(bed.rt).Confirm(context.Background(), string(pod.UID)); confirmErr == nil {
				break
			}
		}
		if confirmErr != nil {
			t.Errorf("3 s after the time limit: %v", confirmErr)
		}
		if evs := containerd.MustReadEvents(t, dir, "main"); !evs.Has("TERM") {
			t.Errorf("main saw %s, want TERM before its death", evs)
		}
	})
}
