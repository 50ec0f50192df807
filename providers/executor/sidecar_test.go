package executor_test

import (
	"testing"
	"time"

	"palisade.dev/palisade/providers/executor"
	"palisade.dev/palisade/test/testbed/containerd"
)

// TestSidecarsEndAfterMains: sidecars get their stop signal only once every main container
// has ended, the last defined first, as the containers' own timestamps show. A regular init
// container between them (long finished, so not running) does not change the order.
func TestSidecarsEndAfterMains(t *testing.T) {
	t.Parallel()
	pod := newPod("sidecars", 20, ctr("main-1", "TERM"), ctr("main-2", "TERM"))
	pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, envVar("EXIT_DELAY", "1"))
	pod.Spec.InitContainers = append(pod.Spec.InitContainers,
		sidecar(ctr("sidecar-a", "TERM")), ctr("init-done", ""), sidecar(ctr("sidecar-b", "TERM")))
	dir := runPod(t, pod)
	rep := terminate(t, executor.Request{Pod: pod})
	m1, m2 := containerd.MustReadEvents(t, dir, "main-1"), containerd.MustReadEvents(t, dir, "main-2")
	a, b := containerd.MustReadEvents(t, dir, "sidecar-a"), containerd.MustReadEvents(t, dir, "sidecar-b")
	mainsEnded := max(containerd.EventAt(t, m1, "main-1", "exit"), containerd.EventAt(t, m2, "main-2", "exit"))
	bTerm, aTerm := containerd.EventAt(t, b, "sidecar-b", "TERM"), containerd.EventAt(t, a, "sidecar-a", "TERM")
	start := min(containerd.EventAt(t, m1, "main-1", "TERM"), containerd.EventAt(t, m2, "main-2", "TERM"))
	t.Logf("MEASURED from the mains' TERM: mains ended %.3fs, sidecar-b TERM %.3fs exit %.3fs, sidecar-a TERM %.3fs",
		(mainsEnded - start).Seconds(), (bTerm - start).Seconds(), (containerd.EventAt(t, b, "sidecar-b", "exit") - start).Seconds(),
		(aTerm - start).Seconds())
	if bTerm < mainsEnded {
		t.Errorf("sidecar-b got TERM at %.2f, before the mains ended at %.2f", bTerm.Seconds(), mainsEnded.Seconds())
	}
	if aTerm < containerd.EventAt(t, b, "sidecar-b", "exit") {
		t.Errorf("sidecar-a got TERM at %.2f, before sidecar-b ended", aTerm.Seconds())
	}
	for _, name := range []string{"main-1", "main-2", "sidecar-a", "sidecar-b"} {
		if c := rep.Container(name); c == nil || c.Outcome != executor.OutcomeExited {
			t.Errorf("report of %s = %+v, want exited on its own", name, c)
		}
	}
}

// TestSidecarsShareTheGrace: waiting for their turn uses the same grace period: with a main
// container that ignores TERM and a 3 s grace, the main is killed at ~3 s and both sidecars
// (which ignore TERM too) get TERM at ~3 s and SIGKILL 2 s later.
func TestSidecarsShareTheGrace(t *testing.T) {
	t.Parallel()
	pod := newPod("sidecar-grace", 3, ctr("main", ""))
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, sidecar(ctr("sidecar-a", "")), sidecar(ctr("sidecar-b", "")))
	dir := runPod(t, pod)
	terminate(t, executor.Request{Pod: pod})
	m := containerd.MustReadEvents(t, dir, "main")
	start := containerd.EventAt(t, m, "main", "TERM")
	assertNear(t, "main TERM to death (grace 3s)", m.Last()-start, 3*time.Second)
	for _, name := range []string{"sidecar-a", "sidecar-b"} {
		evs := containerd.MustReadEvents(t, dir, name)
		assertNear(t, name+" TERM after main's TERM", containerd.EventAt(t, evs, name, "TERM")-start, 3*time.Second)
		assertNear(t, name+" death after main's TERM", evs.Last()-start, 5*time.Second)
	}
}
