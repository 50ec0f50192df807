package fencing

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/detectors/sight"
)

// A policy's pass writes its status only when it changed: a pass over an idle cluster costs no
// request. A node turning failed changes it, and is written.
func TestPolicyPassWritesOnlyWhatChanged(t *testing.T) {
	objs, _ := cluster(map[string]string{"n1": healthy, "n2": healthy})
	base := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, poolPolicy(ipmiMethod))...).
		WithStatusSubresource(&v1alpha1.FencingPolicy{}).Build()
	writes := 0
	c := interceptor.NewClient(base, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			writes++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	r := &PolicyReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c}, Now: func() time.Time { return t0 }}
	reconcilePool(t, r, c)
	if writes != 1 {
		t.Fatalf("first pass: %d status writes, want 1", writes)
	}
	for range 3 {
		reconcilePool(t, r, c)
	}
	if writes != 1 {
		t.Errorf("three passes that changed nothing: %d status writes in all, want still 1", writes)
	}
	stale := metav1.NewMicroTime(t0.Add(-time.Minute))
	l := &coordinationv1.Lease{}
	if err := base.Get(context.Background(), client.ObjectKey{Namespace: lease.Namespace, Name: "n2"}, l); err != nil {
		t.Fatal(err)
	}
	l.Spec.RenewTime = &stale
	if err := base.Update(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if p := reconcilePool(t, r, c); writes != 2 || p.Status.UnhealthyNodes != 1 {
		t.Errorf("after n2 failed: %d status writes, %d unhealthy; want 2 and 1", writes, p.Status.UnhealthyNodes)
	}
}

// A policy is looked at again every policyResync while some of its nodes look failed, so that
// their recovery shows, every policyIdleResync otherwise (a node late but not failed included:
// on a loaded cluster one nearly always is), and at the end of the fresh lease period after the
// controller saw again, when ControllerBlind turns False.
func TestPolicyPassComesSoonerWhileANodeLooksFailed(t *testing.T) {
	for _, tt := range []struct {
		name  string
		state string
		sight sight.Status
		want  time.Duration
	}{
		{"all healthy", healthy, seeingLong, policyIdleResync},
		{"a node failed", dead, seeingLong, policyResync},
		{"a node late", "late", seeingLong, policyIdleResync},
		{"inside the fresh lease period", healthy, seeingAgain, 18 * time.Second}, // sees again since 2 s, period 20 s
		{"blind", healthy, blindNow, policyIdleResync},                            // sight's change wakes it
	} {
		t.Run(tt.name, func(t *testing.T) {
			state := tt.state
			if state == "late" {
				state = healthy
			}
			objs, hbs := cluster(map[string]string{"n1": healthy, "n2": state})
			if tt.state == "late" {
				late := metav1.NewMicroTime(t0.Add(-15 * time.Second)) // past its 10 s renewal, not 20 s
				for _, o := range objs {
					if l, ok := o.(*coordinationv1.Lease); ok && l.Name == "n2" {
						l.Spec.RenewTime = &late
					}
				}
			}
			c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, poolPolicy(ipmiMethod))...).
				WithStatusSubresource(&v1alpha1.FencingPolicy{}).Build()
			o := observe.Observer{Reader: c, Heartbeats: hbs, Sight: &fixedSight{st: tt.sight}}
			r := &PolicyReconciler{Client: c, Recorder: &recorder{}, Observer: o, Now: func() time.Time { return t0 }}
			res, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: client.ObjectKey{Name: "pool"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tt.want {
				t.Errorf("next pass in %s, want %s", res.RequeueAfter, tt.want)
			}
		})
	}
}

// The node controller wakes the policies each time it judges a node failed, and not for a healthy
// or a late one: the policies' status, refreshed every policyIdleResync on an idle cluster, must
// show a failed node at once; late nodes come and go all the time on a loaded cluster.
func TestNodeJudgedFailedWakesThePolicies(t *testing.T) {
	for _, tt := range []struct {
		state   string
		renewed time.Duration // before t0
		verdict detectors.Verdict
		wake    bool
	}{
		{healthy, time.Second, detectors.Healthy, false},
		{"late", 15 * time.Second, detectors.Suspect, false},
		{dead, time.Minute, detectors.Dead, true},
	} {
		t.Run(tt.state, func(t *testing.T) {
			renewed := metav1.NewMicroTime(t0.Add(-tt.renewed))
			objs, hbs := cluster(map[string]string{"n1": healthy, "n2": healthy, "n3": healthy})
			for _, o := range objs {
				if l, ok := o.(*coordinationv1.Lease); ok && l.Name == "n1" {
					l.Spec.RenewTime = &renewed
				}
			}
			c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, poolPolicy(ipmiMethod))...)).Build()
			woken := 0
			r := &NodeReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c, Heartbeats: hbs},
				Now: func() time.Time { return t0 }, WakePolicies: func(string, string) { woken++ }}
			ctx := context.Background()
			node := &corev1.Node{}
			if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, node); err != nil {
				t.Fatal(err)
			}
			if obs, err := r.Observer.Observe(ctx, node, 20*time.Second, t0); err != nil || obs.Verdict != tt.verdict {
				t.Fatalf("n1 judged %s (%v), want %s", obs.Verdict, err, tt.verdict)
			}
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			if got := woken > 0; got != tt.wake {
				t.Errorf("n1 judged %s: the policies woken %d times, want woken %t", tt.verdict, woken, tt.wake)
			}
		})
	}
}

// Wakes come at most one every policyWakeGap; one inside the gap is not lost but sent at its
// end, and any number inside it make one.
func TestWakesCoalesceWithoutLosingTheLast(t *testing.T) {
	w := &wakes{ch: make(chan event.GenericEvent, 10)} // room for every send: none is dropped unseen
	start := time.Now()
	w.wake(start)
	if n := len(w.ch); n != 1 {
		t.Fatalf("first wake: %d sent at once, want 1", n)
	}
	<-w.ch
	for range 3 {
		w.wake(start) // as if at once: the gap's end is then a whole gap after the calls
	}
	if n := len(w.ch); n != 0 {
		t.Fatalf("three wakes inside the gap: %d sent at once, want 0", n)
	}
	select {
	case <-w.ch:
	case <-time.After(policyWakeGap + 2*time.Second):
		t.Fatalf("no wake sent within %s of the gap's start", policyWakeGap+2*time.Second)
	}
	if since := time.Since(start); since < policyWakeGap {
		t.Errorf("the wake held back came %s after the first, before the gap's end (%s)", since, policyWakeGap)
	}
	time.Sleep(policyWakeGap + policyWakeGap/2)
	if n := len(w.ch); n != 0 {
		t.Errorf("%d more wakes sent for the three inside the gap, want the one", n)
	}
}

// A node its policy's saved pass counted failed wakes nothing: the status shows it, and the
// policy is looked at every policyResync while it does. Without this, a node held back (storm
// guard, blind, no method), looked at every few seconds, started a pass of every policy each
// time. A node not shown yet, or not by its own policy, wakes them; a deleted policy's nodes
// are forgotten; and a node whose wake was skipped while a pass was under way, which that pass
// then does not count failed (it failed again after the pass observed it), wakes them when the
// pass is saved.
func TestWakesOnlyForNodesNoStatusShows(t *testing.T) {
	objs, _ := cluster(map[string]string{"n1": dead, "n2": healthy})
	c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, poolPolicy(ipmiMethod))...).
		WithStatusSubresource(&v1alpha1.FencingPolicy{}).Build()
	w := &wakes{ch: make(chan event.GenericEvent, 10)}
	r := &PolicyReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c}, Now: func() time.Time { return t0 }, wakes: w}
	at := time.Now()
	step := func() time.Time { at = at.Add(2 * policyWakeGap); return at } // past the gap each time
	sent := func() bool {
		select {
		case <-w.ch:
			return true
		default:
			return false
		}
	}
	reconcilePool(t, r, c) // counts n1 Dead
	if w.wakeFor("pool", "n1", step()); sent() {
		t.Error("a wake for n1, which the policy's status shows Dead already, was sent")
	}
	if w.wakeFor("pool", "n2", step()); !sent() {
		t.Error("no wake for n2, which no status shows failed")
	}
	if w.wakeFor("other", "n1", step()); !sent() {
		t.Error("no wake for n1 failed under policy other, whose status does not show it")
	}
	// n1 was skipped above; a pass saved without it (n1 back for a moment when observed)
	// may have missed its new failure.
	w.showing("pool", nil, step())
	if !sent() {
		t.Error("no wake when a saved pass left out n1, whose wake was skipped before it")
	}
	w.showing("pool", []string{"n1"}, step())
	w.showing("pool", nil, step())
	if sent() {
		t.Error("a wake when a pass left out n1 with no wake skipped since the pass before")
	}
	reconcilePool(t, r, c)
	if err := c.Delete(context.Background(), poolPolicy()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "pool"}}); err != nil {
		t.Fatal(err)
	}
	for sent() { // the deletion's pass may wake; drain
	}
	if w.wakeFor("pool", "n1", time.Now().Add(time.Hour)); !sent() {
		t.Error("no wake for n1 once its policy was deleted")
	}
}

// nextPass takes the end of the fresh lease period when it comes before the next pass, the
// 5 s one of a policy with a failed node too: ControllerBlind turns False then.
func TestNextPassMeetsTheFreshLeasePeriodsEnd(t *testing.T) {
	failed := health{Failed: []string{"n1"}}
	for _, tt := range []struct {
		name       string
		h          health
		freshUntil time.Time
		want       time.Duration
	}{
		{"idle", health{}, time.Time{}, policyIdleResync},
		{"a node failed", failed, time.Time{}, policyResync},
		{"idle, the period ending in 12 s", health{}, t0.Add(12 * time.Second), 12 * time.Second},
		{"a node failed, the period ending in 3 s", failed, t0.Add(3 * time.Second), 3 * time.Second},
		{"a node failed, the period ending in 12 s", failed, t0.Add(12 * time.Second), policyResync},
		{"the period over", failed, t0.Add(-time.Second), policyResync},
	} {
		if got := nextPass(nodesSeen{h: tt.h, at: t0}, tt.freshUntil, t0); got != tt.want {
			t.Errorf("%s: next pass in %s, want %s", tt.name, got, tt.want)
		}
	}
}

// A pass woken by a change of the controller's sight refreshes ControllerBlind from the nodes
// as the policy's last pass observed them: at 5000 nodes a pass that observes them is about
// 0.15 s of a core, and a controller whose sight flickers on a loaded API server woke one at
// every flicker. The nodes are observed again when they are due (every policyIdleResync, every
// policyResync while some look failed), after a wake for a failed node no status shows, for
// a new generation of the policy, and for a policy deleted and created again under its name.
func TestSightPassTakesTheLastObservations(t *testing.T) {
	objs, _ := cluster(map[string]string{"n1": healthy, "n2": healthy})
	base := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, poolPolicy(ipmiMethod))...).
		WithStatusSubresource(&v1alpha1.FencingPolicy{}).Build()
	looks := 0 // lists of the nodes: one a pass that observes them
	refuse := false
	c := interceptor.NewClient(base, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.NodeList); ok {
				looks++
			}
			return c.List(ctx, list, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if refuse {
				return errors.New("the API server refuses the status write")
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	now := t0
	var atNow func() // called as the pass takes its moment
	renew := func(node string, ago time.Duration) {
		t.Helper()
		l := &coordinationv1.Lease{}
		if err := base.Get(context.Background(), client.ObjectKey{Namespace: lease.Namespace, Name: node}, l); err != nil {
			t.Fatal(err)
		}
		at := metav1.NewMicroTime(now.Add(-ago))
		l.Spec.RenewTime = &at
		if err := base.Update(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	sees := &fixedSight{st: seeingLong}
	w := &wakes{ch: make(chan event.GenericEvent, 10)}
	r := &PolicyReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c, Sight: sees},
		Now: func() time.Time {
			if atNow != nil {
				atNow()
			}
			return now
		}, wakes: w, passes: &lastPasses{}}
	pass := func(step string, wantLooks int, wantBlind metav1.ConditionStatus, wantUnhealthy int32, wantNext time.Duration) {
		t.Helper()
		renew("n1", time.Second)
		ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "pool"}})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		p := &v1alpha1.FencingPolicy{}
		if err := base.Get(ctx, client.ObjectKey{Name: "pool"}, p); err != nil {
			t.Fatal(err)
		}
		blind := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionControllerBlind)
		switch {
		case looks != wantLooks:
			t.Errorf("%s: the nodes observed by %d passes in all, want %d", step, looks, wantLooks)
		case blind == nil || blind.Status != wantBlind:
			t.Errorf("%s: ControllerBlind %v, want %s", step, blind, wantBlind)
		case p.Status.UnhealthyNodes != wantUnhealthy:
			t.Errorf("%s: %d nodes unhealthy in the status, want %d", step, p.Status.UnhealthyNodes, wantUnhealthy)
		case res.RequeueAfter != wantNext:
			t.Errorf("%s: next pass in %s, want %s", step, res.RequeueAfter, wantNext)
		}
	}
	renew("n2", time.Second)
	pass("first pass", 1, metav1.ConditionFalse, 0, policyIdleResync)

	now = now.Add(time.Second)
	sees.st = sight.Status{Blind: true, Cause: sight.WatchStale, Message: "stale", Since: now, LastLost: now}
	renew("n2", time.Minute) // failed once sight is back long enough; observed now it would not read failed: looks tells
	pass("blind", 1, metav1.ConditionTrue, 0, policyIdleResync-time.Second)

	now = now.Add(2 * time.Second)
	sees.st = sight.Status{Cause: sight.WatchStale, Message: "stale", Since: now, LastLost: now.Add(-2 * time.Second)}
	pass("seeing again", 1, metav1.ConditionTrue, 0, 20*time.Second) // the fresh lease period ends first

	now = now.Add(20 * time.Second)
	pass("the fresh lease period over", 1, metav1.ConditionFalse, 0, policyIdleResync-23*time.Second)

	now = now.Add(7 * time.Second) // policyIdleResync after the first pass
	pass("the nodes due", 2, metav1.ConditionFalse, 1, policyResync)

	now = now.Add(time.Second)
	pass("a second on", 2, metav1.ConditionFalse, 1, policyResync-time.Second)

	w.wakeFor("pool", "n2", time.Now()) // shown: skipped
	pass("a wake for a node shown failed", 2, metav1.ConditionFalse, 1, policyResync-time.Second)

	renew("n2", time.Second)
	w.wakeFor("pool", "n1", time.Now()) // not shown: woken
	pass("a wake for a node not shown", 3, metav1.ConditionFalse, 0, policyIdleResync)
	// n2's wake was skipped and this pass left n2 out: it may have failed again since it was
	// observed (TestWakesOnlyForNodesNoStatusShows), so the next pass looks again.
	pass("a skipped node left out", 4, metav1.ConditionFalse, 0, policyIdleResync)
	pass("nothing new", 4, metav1.ConditionFalse, 0, policyIdleResync)

	p := &v1alpha1.FencingPolicy{}
	if err := base.Get(context.Background(), client.ObjectKey{Name: "pool"}, p); err != nil {
		t.Fatal(err)
	}
	// A spec change, and the new generation the API server would give it (the fake client
	// keeps the one it is given).
	gen := p.Generation + 1
	p.Spec.Release.VerifyWindow, p.Generation = &metav1.Duration{Duration: 5 * time.Second}, gen
	if err := base.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(context.Background(), client.ObjectKey{Name: "pool"}, p); err != nil || p.Generation != gen {
		t.Fatalf("the policy's generation %d (%v), want %d", p.Generation, err, gen)
	}
	pass("a new generation", 5, metav1.ConditionFalse, 0, policyIdleResync)

	// Deleted and created again under the same name between two passes: the same generation
	// (both at their first, on an API server), another policy.
	if err := base.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	again := poolPolicy(ipmiMethod)
	again.UID, again.Generation = "another-pool", gen
	if err := base.Create(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(context.Background(), client.ObjectKey{Name: "pool"}, again); err != nil || again.Generation != gen || again.UID == p.UID {
		t.Fatalf("the policy created again: generation %d, UID %q (%v); want generation %d, a UID other than %q", again.Generation, again.UID, err, gen, p.UID)
	}
	pass("the policy created again", 6, metav1.ConditionFalse, 0, policyIdleResync)

	// A wake counted as an observing pass takes its moment may come from a look at a node after
	// that moment, which this pass judges too early: the next pass observes again.
	now = now.Add(policyIdleResync) // due
	renew("n2", time.Second)
	atNow = func() { w.wakeFor("pool", "n2", time.Now()); atNow = nil }
	pass("a wake as the pass began", 7, metav1.ConditionFalse, 0, policyIdleResync)
	pass("the pass after it", 8, metav1.ConditionFalse, 0, policyIdleResync)

	// An observing pass whose status write fails keeps nothing: the next observes again.
	now = now.Add(time.Second)
	renew("n2", time.Minute)
	w.wakeFor("pool", "n2", time.Now())
	refuse = true
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "pool"}}); err == nil {
		t.Fatal("a pass whose status write was refused returned no error")
	}
	refuse = false
	pass("after a refused write", 10, metav1.ConditionFalse, 1, policyResync)
}
