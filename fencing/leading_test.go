package fencing

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/providers"
)

var leaderKey = types.NamespacedName{Namespace: "palisade-system", Name: "palisade-controller.fencing.palisade.dev"}

// setLeaderLease writes the leader-election Lease: held by holder, last renewed at renewed,
// for 15 s.
func setLeaderLease(t *testing.T, c client.Client, holder string, renewed time.Time) {
	t.Helper()
	ctx := context.Background()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaderKey.Namespace, Name: leaderKey.Name}}
	err := c.Get(ctx, leaderKey, l)
	l.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}}
	if err == nil {
		err = c.Update(ctx, l)
	} else {
		err = c.Create(ctx, l)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// The Lease says whether this replica leads: held by it and renewed within its duration, on
// its own clock.
func TestLeaderLeaseCheck(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		holder  string
		renewed time.Time
		leads   bool
	}{
		{"held and fresh", "me", now.Add(-2 * time.Second), true},
		{"held by another replica", "other", now.Add(-2 * time.Second), false},
		{"held, expired (this replica stood still)", "me", now.Add(-15 * time.Second), false},
		{"released (no holder)", "", now, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeclient.NewClientBuilder().Build()
			setLeaderLease(t, c, tc.holder, tc.renewed)
			err := (&LeaderLease{Reader: c, Key: leaderKey, Identity: "me", Now: func() time.Time { return now }}).Check(context.Background())
			if (err == nil) != tc.leads || err != nil && !errors.Is(err, ErrNotLeading) {
				t.Errorf("Check = %v, want leading %t (refusals wrap ErrNotLeading)", err, tc.leads)
			}
		})
	}
	c := fakeclient.NewClientBuilder().Build()
	if err := (&LeaderLease{Reader: c, Key: leaderKey, Identity: "me"}).Check(context.Background()); err == nil {
		t.Error("Check without a Lease said this replica leads")
	}
}

// A replica that stood still past its Lease (a GC pause, a frozen VM) and wakes in the middle of
// a fence takes no step that acts — neither a fence step nor a release step — while another
// replica holds the Lease or its own expired; confirmations, which only read, go on. Leading
// again, it goes on where it was.
func TestDeposedLeaderTakesNoStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stop is the step during which this replica stops leading ("": from the start); the
		// step after it is refused.
		stop v1alpha1.StepName
		// untouched says the world is as before the step.
		untouched func(t *testing.T, w *world)
	}{
		{"fence step", "", func(t *testing.T, w *world) {
			if n := w.power.CallCount("Fence", "n1"); n != 0 {
				t.Errorf("the power-off was sent %d times by a replica that does not lead", n)
			}
		}},
		{"release step", v1alpha1.StepVerifyFenced, func(t *testing.T, w *world) { checkReleased(t, w, false) }},
	} {
		for _, how := range []string{"another replica leads", "its own Lease expired"} {
			t.Run(tc.name+", "+how, func(t *testing.T) {
				w := newWorld(t, "ipmi")
				w.setNode(t, notReady)
				leading := true
				w.r.Leader = &LeaderLease{Reader: w.c, Key: leaderKey, Identity: "me", Now: func() time.Time { return w.now }}
				setLeaderLease(t, w.c, "me", w.now)
				w.tick = func(nf *v1alpha1.NodeFence) {
					if tc.stop == "" || len(nf.Status.Steps) > 0 && lastStep(nf).Name == tc.stop {
						leading = false
					}
					switch {
					case leading:
						setLeaderLease(t, w.c, "me", w.now) // its elector renews
					case how == "another replica leads":
						setLeaderLease(t, w.c, "other", w.now)
					default: // it stood still for 20 s since its elector's last renewal
						setLeaderLease(t, w.c, "me", w.now.Add(-20*time.Second))
					}
				}
				w.ticks = 40
				nf, ended := w.advance(t)
				after := 0 // the steps begun after the one it stopped leading in
				for i, st := range nf.Status.Steps {
					if st.Name == tc.stop {
						after = i + 1
					}
				}
				for _, st := range nf.Status.Steps[after:] {
					if actsOnTheWorld(st.Name) && (st.State != v1alpha1.StepStarted || st.Attempts > 0) {
						t.Fatalf("step %s was taken under a replica that does not lead (ended %t):\n%s", st.Name, ended, goldenTrace(nf))
					}
				}
				if ended {
					t.Fatalf("the fence ended under a replica that does not lead:\n%s", goldenTrace(nf))
				}
				tc.untouched(t, w)
				// Leading again: the fence goes on and is released.
				leading = true
				w.tick = func(*v1alpha1.NodeFence) { setLeaderLease(t, w.c, "me", w.now) }
				if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
					t.Fatalf("fence ended %s once leading again, want Released:\n%s", nf.Status.Phase, goldenTrace(nf))
				}
				checkReleased(t, w, true)
			})
		}
	}
}

// A released fence's node found clean is not unfenced (its taint stays), nor its machine
// powered on (recovery.powerOn), by a replica that no longer leads; the pass is tried again
// soon, and leading again, the replica does both.
func TestDeposedLeaderUnfencesNothing(t *testing.T) {
	w, _ := releasedWorld(t, func(nf *v1alpha1.NodeFence) { nf.Spec.Recovery.PowerOn = true })
	w.r.Leader = &LeaderLease{Reader: w.c, Key: leaderKey, Identity: "me", Now: func() time.Time { return w.now }}
	setLeaderLease(t, w.c, "other", w.now)
	res, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
	if err != nil || res.RequeueAfter != retryLeading {
		t.Errorf("Reconcile = %+v, %v; want it tried again after %s", res, err, retryLeading)
	}
	if n := w.power.CallCount("RestorePower", "n1"); n != 0 {
		t.Errorf("a replica that does not lead powered the machine on %d times", n)
	}
	setLeaderLease(t, w.c, "me", w.now)
	w.reconcile(t)
	if n := w.power.CallCount("RestorePower", "n1"); n != 1 {
		t.Errorf("the machine was powered on %d times once leading, want 1", n)
	}
	setLeaderLease(t, w.c, "other", w.now)
	w.setNode(t, back(bootAfter))
	if nf, node := w.reconcile(t); !tainted(node) || nf.Status.Recovery != nil {
		t.Errorf("a replica that does not lead unfenced the node (taint gone: %t) or recorded the decision a new leader would carry out (%+v)", !tainted(node), nf.Status.Recovery)
	}
	setLeaderLease(t, w.c, "me", w.now)
	nf, node := w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
}

// A replica that does not lead creates no NodeFence: what it judged, it saw before it stood
// still.
func TestDeposedLeaderCreatesNoFence(t *testing.T) {
	c, r, _ := requestWorld(t, poolPolicy(ipmiMethod), nil, nil)
	r.Leader = &LeaderLease{Reader: c, Key: leaderKey, Identity: "me", Now: func() time.Time { return t0 }}
	setLeaderLease(t, c, "other", t0)
	if _, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); !errors.Is(err, ErrNotLeading) {
		t.Errorf("Reconcile = %v, want a refusal wrapping ErrNotLeading", err)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &v1alpha1.NodeFence{}); err == nil {
		t.Fatal("a replica that does not lead created a NodeFence")
	}
	setLeaderLease(t, c, "me", t0)
	reconcileN1(t, r)
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &v1alpha1.NodeFence{}); err != nil {
		t.Errorf("no NodeFence once leading: %v", err)
	}
}

// A deleted NodeFence's storage fence is not lifted by a replica that does not lead; leading
// again, it lifts it and lets the NodeFence go.
func TestDeposedLeaderLiftsNoStorageFence(t *testing.T) {
	s := &storage{answers: []providers.Status{{State: providers.Confirmed, Message: "lifted"}}}
	w, _ := storageWorld(t, s, storageMethod)
	s.SetIgnoreFence(true) // the storage never reads the fence in place: the fence fails
	if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("phase %s, want Failed", nf.Status.Phase)
	}
	w.r.Leader = &LeaderLease{Reader: w.c, Key: leaderKey, Identity: "me", Now: func() time.Time { return w.now }}
	setLeaderLease(t, w.c, "other", w.now)
	if nf := w.deleteFence(t, 2); nf == nil || s.lifts != 0 {
		t.Fatalf("a replica that does not lead lifted the storage fence %d times (NodeFence left: %t)", s.lifts, nf != nil)
	}
	setLeaderLease(t, w.c, "me", w.now)
	if nf := w.reconcileDeleted(t, 1); nf != nil || s.lifts != 1 {
		t.Errorf("once leading: %d lifts, NodeFence left %t; want 1 lift and the NodeFence gone", s.lifts, nf != nil)
	}
}

// A replica that does not lead keeps the finalizer of a deleted Node that no policy covers any
// more (letting it go has PodGC force-delete the node's pods); leading again, it lets it go.
func TestDeposedLeaderLetsNoDeletionGo(t *testing.T) {
	objs, _ := cluster(map[string]string{"n1": dead})
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			now := metav1.NewTime(t0)
			n.DeletionTimestamp = &now
			n.Finalizers = []string{v1alpha1.FinalizerFenceOnDelete}
		}
	}
	c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
	r := &NodeReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c}, Now: func() time.Time { return t0 },
		Leader: &LeaderLease{Reader: c, Key: leaderKey, Identity: "me", Now: func() time.Time { return t0 }}}
	setLeaderLease(t, c, "other", t0)
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); !errors.Is(err, ErrNotLeading) {
		t.Errorf("Reconcile = %v, want a refusal wrapping ErrNotLeading", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, &corev1.Node{}); err != nil {
		t.Fatalf("the deletion of n1 went on under a replica that does not lead: %v", err)
	}
	setLeaderLease(t, c, "me", t0)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, &corev1.Node{}); !apierrors.IsNotFound(err) {
		t.Errorf("n1 still there once leading (%v): want its deletion let go", err)
	}
}

// A recovery decided before (by the leader this replica was, or another) is not carried out by
// a replica that does not lead now: the taint stays.
func TestDeposedLeaderCarriesOutNoDecidedRecovery(t *testing.T) {
	w, _ := releasedWorld(t, nil)
	w.setNode(t, back(bootAfter))
	nf := &v1alpha1.NodeFence{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	nf.Status.Recovery = &v1alpha1.RecoveryRecord{How: v1alpha1.RecoveryRebooted, Time: metav1.NewTime(w.now), BootID: bootAfter, Reason: "rebooted"}
	if err := w.c.Status().Update(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	w.r.Leader = &LeaderLease{Reader: w.c, Key: leaderKey, Identity: "me", Now: func() time.Time { return w.now }}
	setLeaderLease(t, w.c, "other", w.now)
	if _, node := w.reconcile(t); !tainted(node) {
		t.Error("a replica that does not lead carried out a recovery decided before: the taint is gone")
	}
	setLeaderLease(t, w.c, "me", w.now)
	nf, node := w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
}
