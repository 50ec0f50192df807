package fencing

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// With every release slot taken by other fences, a fence's verify passes still run on time and
// its window still ends when due, but nothing of its release (nor any other step) is done until
// a slot is free; every reconcile gives its slot back.
func TestVerifyPassesDoNotWaitForReleases(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, "ipmi")
	w.r.lane = make(releaseLane, 1)
	req := ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}
	get := func() *v1alpha1.NodeFence {
		t.Helper()
		nf := &v1alpha1.NodeFence{}
		if err := w.c.Get(ctx, req.NamespacedName, nf); err != nil {
			t.Fatal(err)
		}
		return nf
	}
	held := 0 // the slots the test holds, as other fences' releases would
	hold := func() { w.r.lane <- struct{}{}; held++ }
	free := func() { <-w.r.lane; held-- }
	reconcile := func() ctrl.Result {
		t.Helper()
		res, err := w.r.Reconcile(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(w.r.lane) != held {
			t.Fatalf("%d release slots taken after the reconcile, want %d: the reconcile kept its slot", len(w.r.lane), held)
		}
		return res
	}

	// Every slot taken: a fence not yet started takes no step, draws no token.
	hold()
	if res := reconcile(); res.RequeueAfter != laneRetry {
		t.Errorf("with every slot taken, a fence not started is requeued after %s, want %s", res.RequeueAfter, laneRetry)
	}
	if nf := get(); len(nf.Status.Steps) != 0 || nf.Status.Token != 0 {
		t.Fatalf("with every slot taken, the fence took a step: token %d, steps %+v", nf.Status.Token, nf.Status.Steps)
	}

	// A slot free: the fence is confirmed and its window opens.
	free()
	for i := 0; !watching(get()) || get().Status.Liveness == nil; i++ {
		if i == 10 {
			t.Fatalf("the fence did not get to its verify window: %+v", get().Status)
		}
		reconcile()
		w.now = w.now.Add(time.Second)
	}
	until := get().Status.Liveness.WatchUntil.Time

	// Every slot taken again (another fence's release): the passes go on, each due at most a second on.
	hold()
	passes := 0
	for w.now.Before(until) {
		res := reconcile()
		passes++
		if res.RequeueAfter <= laneRetry || res.RequeueAfter > time.Second {
			t.Fatalf("a pass inside the window was requeued after %s, want its next pass within a second", res.RequeueAfter)
		}
		w.now = w.now.Add(res.RequeueAfter)
	}
	if passes == 0 {
		t.Fatal("no pass inside the window: the test did not test")
	}
	// The pass at the window's end ends it and records it, but releases nothing without a slot.
	if res := reconcile(); res.RequeueAfter != laneRetry {
		t.Errorf("the pass that ended the window was requeued after %s, want %s (waiting for a slot)", res.RequeueAfter, laneRetry)
	}
	nf := get()
	if v := stepOf(nf, v1alpha1.StepVerifyFenced); v.State != v1alpha1.StepSucceeded {
		t.Fatalf("the window's end is not recorded: VerifyFenced %+v", v)
	}
	if last := lastStep(nf); last.Name != v1alpha1.StepVerifyFenced {
		t.Errorf("a step after the window was taken without a slot: %s %s", last.Name, last.State)
	}
	checkReleased(t, w, false)
	if res := reconcile(); res.RequeueAfter != laneRetry {
		t.Errorf("with every slot still taken, the verified fence was requeued after %s, want %s", res.RequeueAfter, laneRetry)
	}
	checkReleased(t, w, false)

	// The slot free again: the release goes on.
	free()
	for i := 0; get().Status.Phase != v1alpha1.PhaseReleased; i++ {
		if i == 10 {
			t.Fatalf("the fence was not released once a slot was free: %+v", get().Status)
		}
		reconcile()
		w.now = w.now.Add(time.Second)
	}
	checkReleased(t, w, true)
}

// Everything but a pass of an open verify window takes a slot: a fence being deleted or in a
// dry run, and a window's pass only while the window is open.
func TestPassing(t *testing.T) {
	verifying := []v1alpha1.Step{{Name: v1alpha1.StepVerifyFenced, State: v1alpha1.StepStarted}}
	now := metav1.Now()
	for _, tt := range []struct {
		name string
		nf   v1alpha1.NodeFence
		want bool
	}{
		{"new", v1alpha1.NodeFence{}, false},
		{"confirming", v1alpha1.NodeFence{Status: v1alpha1.NodeFenceStatus{Steps: []v1alpha1.Step{{Name: v1alpha1.StepConfirmOff, State: v1alpha1.StepStarted}}}}, false},
		{"window open", v1alpha1.NodeFence{Status: v1alpha1.NodeFenceStatus{Steps: verifying}}, true},
		{"window ended", v1alpha1.NodeFence{Status: v1alpha1.NodeFenceStatus{Steps: []v1alpha1.Step{{Name: v1alpha1.StepVerifyFenced, State: v1alpha1.StepSucceeded}}}}, false},
		{"window open, deleted", v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: v1alpha1.NodeFenceStatus{Steps: verifying}}, false},
		{"window open, dry run", v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{DryRun: true}, Status: v1alpha1.NodeFenceStatus{Steps: verifying}}, false},
	} {
		if got := passing(&tt.nf); got != tt.want {
			t.Errorf("%s: passing = %t, want %t", tt.name, got, tt.want)
		}
	}
}
