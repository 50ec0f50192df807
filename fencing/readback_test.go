package fencing

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// woken is the fence a ReadBacks event wakes, "" when none is waiting to be taken.
func woken(t *testing.T, w *ReadBacks) string {
	t.Helper()
	select {
	case e := <-w.events:
		nf, ok := e.Object.(*v1alpha1.NodeFence)
		if !ok {
			t.Fatalf("event of a %T, want a NodeFence", e.Object)
		}
		if p := queuePriority(nf); p < passFirst {
			t.Errorf("fence %s woken with priority %d, want a verify pass's (≥ %d): it would wait behind release steps", nf.Name, p, passFirst)
		}
		return nf.Name
	default:
		return ""
	}
}

// A fence whose Executor window has ended, its agent's latest read-back from before the end,
// waits on the agent; a heartbeat sent at or after the end that reads none running wakes it at
// once, and only that one: one sent before the end (held back in the network), one that reads
// nothing back, another node's. Its next pass releases, and the fence no longer waits.
func TestReadBackWakesTheFenceWaitingOnIt(t *testing.T) {
	w := newWorld(t, "executor")
	readBacks := NewReadBacks()
	w.r.ReadBacks = readBacks
	hbs := heartbeats{}
	w.r.Heartbeats = hbs
	zero, two := 0, 2
	confirmed := false
	w.tick = func(nf *v1alpha1.NodeFence) {
		if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionFenced); c != nil && c.Status == metav1.ConditionTrue {
			confirmed = true
			return // its heartbeats from now on are held back: the latest is from before the end
		}
		hbs["n1"] = agentwire.Heartbeat{Node: "n1", Received: w.now, Sent: w.now, Interval: time.Second, RunningContainers: &zero,
			Executor: &agentwire.ExecutorStatus{ID: "fence-uid/executor", State: agentwire.ExecutorConfirmed, KubeletStopped: true}}
	}
	w.ticks = 1
	var nf *v1alpha1.NodeFence
	for i := 0; ; i++ {
		if i == 30 {
			t.Fatalf("the fence never waited for the read-back after its window: %+v", nf.Status)
		}
		var ended bool
		if nf, ended = w.advance(t); ended {
			t.Fatalf("the fence ended without a read-back after its window: %+v", nf.Status)
		}
		s := lastStep(nf)
		if confirmed && s.Name == v1alpha1.StepVerifyFenced && nf.Status.Liveness != nil && w.now.After(nf.Status.Liveness.WatchUntil.Time) {
			break
		}
	}
	until := nf.Status.Liveness.WatchUntil.Time
	if got := woken(t, readBacks); got != "" {
		t.Fatalf("fence %s woken before any heartbeat", got)
	}
	for _, hb := range []agentwire.Heartbeat{
		{Node: "n1", Received: w.now, Sent: until.Add(-time.Millisecond), RunningContainers: &zero},
		{Node: "n1", Received: w.now, RunningContainers: &zero},
		{Node: "n1", Received: w.now, Sent: w.now},
		{Node: "n2", Received: w.now, Sent: w.now, RunningContainers: &zero},
		{Node: "n1", Received: afterConfirmation(nf).Add(-time.Millisecond), Sent: until, RunningContainers: &two},
	} {
		readBacks.Heard(hb)
		if got := woken(t, readBacks); got != "" {
			t.Errorf("a heartbeat that does not decide the window (%+v) woke fence %s", hb, got)
		}
	}
	covers := agentwire.Heartbeat{Node: "n1", Received: w.now, Sent: until, Interval: time.Second, RunningContainers: &zero,
		Executor: &agentwire.ExecutorStatus{ID: "fence-uid/executor", State: agentwire.ExecutorConfirmed, KubeletStopped: true}}
	readBacks.Heard(covers)
	if got := woken(t, readBacks); got != "n1" {
		t.Fatalf("the read-back sent at the window's end woke %q, want fence n1", got)
	}
	readBacks.Heard(covers)
	if got := woken(t, readBacks); got != "" {
		t.Errorf("a second heartbeat woke fence %s again before its pass", got)
	}
	hbs["n1"] = covers
	w.ticks = 30
	if nf = w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("the fence woken by its read-back ended %s: %+v", nf.Status.Phase, nf.Status)
	}
	if len(readBacks.waiting) != 0 {
		t.Errorf("a released fence still waits on its agent: %+v", readBacks.waiting)
	}
}

// A heartbeat that reads the workload running again while the window is open wakes the fence at
// once, to fail the method and take the taint off, not a recheck later.
func TestReadBackWakesTheFenceOnAWorkloadBack(t *testing.T) {
	confirmed := metav1.NewTime(t0)
	// A manual fence: its name is not its node's.
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "maint-n1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"},
		Status: v1alpha1.NodeFenceStatus{Method: "executor", FencedTime: &confirmed,
			Steps: []v1alpha1.Step{{Name: v1alpha1.StepVerifyFenced, State: v1alpha1.StepStarted}}}}
	w := NewReadBacks()
	until := t0.Add(5 * time.Second)
	w.wait(nf, until)
	one, zero := 1, 0
	w.Heard(agentwire.Heartbeat{Node: "n1", Received: t0.Add(2 * time.Second), Sent: t0.Add(2 * time.Second), RunningContainers: &zero})
	if got := woken(t, w); got != "" {
		t.Errorf("none running inside the window woke fence %s", got)
	}
	w.Heard(agentwire.Heartbeat{Node: "n1", Received: t0.Add(2 * time.Second), Sent: t0.Add(2 * time.Second), RunningContainers: &one})
	if got := woken(t, w); got != "maint-n1" {
		t.Errorf("a workload back inside the window woke %q, want fence maint-n1", got)
	}
	// Forgotten once its fence is gone (or its step over), by the fence's name: nothing wakes
	// it then. Another fence's name (the node's) forgets nothing.
	w.wait(nf, until)
	w.done("n1")
	w.Heard(agentwire.Heartbeat{Node: "n1", Received: until, Sent: until, RunningContainers: &one})
	if got := woken(t, w); got != "maint-n1" {
		t.Errorf("after another fence's name was forgotten, a workload back woke %q, want fence maint-n1", got)
	}
	w.wait(nf, until)
	w.done("maint-n1")
	w.Heard(agentwire.Heartbeat{Node: "n1", Received: until, Sent: until, RunningContainers: &one})
	if got := woken(t, w); got != "" {
		t.Errorf("a forgotten fence %s woken", got)
	}
}

// A wake reaches the controller's work queue as the fence's request, ready at once and at a
// verify pass's priority, ahead of a release step's requeue that was there first.
func TestReadBackWakeQueuedFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := priorityqueue.New[reconcile.Request]("nodefence-test")
	defer q.ShutDown()
	w := NewReadBacks()
	if err := w.source().Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	releasing := reconcile.Request{NamespacedName: client.ObjectKey{Name: "other"}}
	q.Add(releasing) // a release step's pass, there first, at priority 0
	confirmed := metav1.NewTime(t0)
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "maint-n1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "n1", Urgency: 30},
		Status: v1alpha1.NodeFenceStatus{Method: "executor", FencedTime: &confirmed,
			Steps: []v1alpha1.Step{{Name: v1alpha1.StepVerifyFenced, State: v1alpha1.StepStarted}}}}
	until := t0.Add(5 * time.Second)
	w.wait(nf, until)
	zero := 0
	w.Heard(agentwire.Heartbeat{Node: "n1", Received: until, Sent: until, RunningContainers: &zero})
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the wake never reached the work queue (%d queued)", q.Len())
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, prio, _ := q.GetWithPriority()
	if got.Name != "maint-n1" || prio != passFirst+30 {
		t.Errorf("the queue hands out %s at priority %d first, want maint-n1 at %d", got.Name, prio, passFirst+30)
	}
}

// Heard never blocks the heartbeat server: with the controller's events full, a wake is dropped
// (the fence's requeue looks anyway).
func TestReadBackNeverBlocksTheServer(t *testing.T) {
	w := NewReadBacks()
	zero := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range readBackEvents + 10 {
			node := "n" + time.Duration(i).String()
			nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: v1alpha1.NodeFenceSpec{NodeName: node},
				Status: v1alpha1.NodeFenceStatus{FencedTime: &metav1.Time{Time: t0}, Steps: []v1alpha1.Step{{Name: v1alpha1.StepVerifyFenced, State: v1alpha1.StepStarted}}}}
			w.wait(nf, t0)
			w.Heard(agentwire.Heartbeat{Node: node, Received: t0.Add(time.Second), Sent: t0.Add(time.Second), RunningContainers: &zero})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Heard blocked with the events full")
	}
	if n := len(w.events); n != readBackEvents {
		t.Errorf("%d wakes queued, want the channel full (%d)", n, readBackEvents)
	}
}
