package fencing

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/providers"
)

// A request is acted on once: a fence that fails answers the request it was made for and any
// made while it ran; they are removed before the failure is recorded, said on the Node. Left,
// the node would be powered off again the moment someone deletes the failed NodeFence. A
// malformed request fences nothing, and stays.
func TestFailedFenceAnswersItsRequests(t *testing.T) {
	for _, tc := range []struct {
		name    string
		manual  bool // the fence is carol's request "disk errors", on the node from the start
		during  string
		removed bool
	}{
		{name: "the request the fence was made for", manual: true, removed: true},
		{name: "one made while the fence ran", during: "it looks dead", removed: true},
		{name: "another one made while a manual fence ran", manual: true, during: "and the PSU", removed: true},
		{name: "a malformed one made while the fence ran", during: "bell\x07"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, "ipmi")
			rec := &recorder{}
			w.r.Recorder = rec
			ctx := context.Background()
			text, by := "disk errors", "carol"
			if tc.manual {
				nf := &v1alpha1.NodeFence{}
				if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
					t.Fatal(err)
				}
				nf.Spec.Trigger, nf.Spec.Reason, nf.Spec.RequestedBy = v1alpha1.TriggerManual, text, by
				if err := w.c.Update(ctx, nf); err != nil {
					t.Fatal(err)
				}
				w.setNode(t, fenceRequest(text, by))
			}
			if tc.during != "" {
				text, by = tc.during, "dave"
				made := false
				w.tick = func(*v1alpha1.NodeFence) { // the fence exists, and fails in its first pass
					if !made {
						made = true
						w.setNode(t, fenceRequest(text, by))
					}
				}
			}
			w.power.SetStatus(&providers.Status{State: providers.Failed, Reason: providers.ReasonBadTarget, Message: "fake: the BMC answers for another machine"})
			if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseFailed {
				t.Fatalf("fence ended %s, want Failed", nf.Status.Phase)
			}
			node := &corev1.Node{}
			if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, node); err != nil {
				t.Fatal(err)
			}
			_, kept := node.Annotations[v1alpha1.AnnotationFenceRequest]
			_, keptBy := node.Annotations[v1alpha1.AnnotationFenceRequestedBy]
			if kept == tc.removed || keptBy == tc.removed {
				t.Errorf("after the failure n1 carries a fence request: %v (by: %v); want it removed: %v", kept, keptBy, tc.removed)
			}
			said := rec.said(ReasonFenceRequestAnswered)
			if !tc.removed {
				if len(said) > 0 {
					t.Errorf("%s said %q of a malformed request", ReasonFenceRequestAnswered, said)
				}
				return
			}
			if !slices.Contains(rec.recorded(), eventSeen{"Node/n1", corev1.EventTypeNormal, ReasonFenceRequestAnswered}) {
				t.Errorf("events %v: no %s on Node/n1", rec.recorded(), ReasonFenceRequestAnswered)
			}
			for _, w := range []string{`"` + text + `"`, by, "failed", "removed", "request again"} {
				if len(said) == 0 || !strings.Contains(said[0], w) {
					t.Errorf("%s said %q, not %q", ReasonFenceRequestAnswered, said, w)
				}
			}

			// The failed NodeFence is deleted (what failed was fixed): nothing fences the node
			// again for the request its requester saw fail.
			if err := w.c.Delete(ctx, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			nodes := nodeReconcilerOver(t, w)
			reconcileN1(t, nodes)
			if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, &v1alpha1.NodeFence{}); !apierrors.IsNotFound(err) {
				t.Errorf("after the failed NodeFence's deletion n1 was fenced again (%v): the answered request acted on twice", err)
			}
		})
	}
}

// nodeReconcilerOver is a node reconciler over w's client, with a policy selecting healthy n1.
func nodeReconcilerOver(t *testing.T, w *world) *NodeReconciler {
	t.Helper()
	ctx := context.Background()
	now := w.now
	renew := metav1.NewMicroTime(now.Add(-time.Second))
	for _, o := range []client.Object{poolPolicy(ipmiMethod),
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: "n1"}, Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}} {
		if err := w.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	w.setNode(t, func(n *corev1.Node) { n.Labels = map[string]string{"pool": "a"} })
	return &NodeReconciler{Client: w.c, Recorder: &recorder{}, Observer: observe.Observer{Reader: w.c, Heartbeats: heartbeats{}}, Now: func() time.Time { return now }}
}

// A fence request made while a fence of the node stands is told, once, what becomes of it;
// nothing else changes. The fence's own request is the fence's to answer.
func TestFenceRequestWhileAFenceStands(t *testing.T) {
	fence := func(phase v1alpha1.Phase, edit func(*v1alpha1.NodeFence)) *v1alpha1.NodeFence {
		nf := recoveredFence()
		nf.UID = "standing-uid"
		nf.Spec.Trigger, nf.Spec.Reason, nf.Spec.RequestedBy = v1alpha1.TriggerDetected, "Dead: no Lease", ""
		nf.Status = v1alpha1.NodeFenceStatus{Phase: phase}
		if edit != nil {
			edit(nf)
		}
		return nf
	}
	looked := func(nf *v1alpha1.NodeFence) {
		setCondition(nf, v1alpha1.ConditionRecovered, metav1.ConditionFalse, ReasonNodeNotBack, "not back")
	}
	own := func(nf *v1alpha1.NodeFence) {
		nf.Spec.Trigger, nf.Spec.Reason, nf.Spec.RequestedBy = v1alpha1.TriggerManual, "test", "carol"
	}
	leaving := func(nf *v1alpha1.NodeFence) {
		now := metav1.NewTime(t0)
		nf.DeletionTimestamp, nf.Finalizers = &now, []string{v1alpha1.FinalizerLiftStorageFence}
	}
	for _, tc := range []struct {
		name     string
		existing *v1alpha1.NodeFence
		policy   *v1alpha1.FencingPolicy // nil: poolPolicy
		request  string                  // n1's request; "" is carol's "test"
		reason   string                  // the event's; "" for none
		typ      string
		words    []string
	}{
		{name: "under way", existing: fence(v1alpha1.PhaseFencing, nil), reason: ReasonFenceRequestWaiting, typ: corev1.EventTypeNormal,
			words: []string{`"test"`, "carol", "NodeFence n1", "under way (phase Fencing)", "removed at the fence's release or failure", "request again"}},
		{name: "released, not looked at yet", existing: fence(v1alpha1.PhaseReleased, nil), reason: ReasonFenceRequestWaiting, typ: corev1.EventTypeNormal,
			words: []string{"under way (phase Released)", ReasonFenceRequestAnswered}},
		{name: "held fenced", existing: fence(v1alpha1.PhaseReleased, looked), reason: ReasonFenceRequestWaiting, typ: corev1.EventTypeNormal,
			words: []string{"held fenced by NodeFence n1", "kept", "once the node is given back", "fences the node (policy pool)"}},
		{name: "failed", existing: fence(v1alpha1.PhaseFailed, nil), reason: ReasonFenceRequestWaiting, typ: corev1.EventTypeWarning,
			words: []string{"NodeFence n1 of node n1 failed", "once that NodeFence is deleted", "kubectl delete nodefence n1", "fences the node (policy pool)"}},
		{name: "failed, under a dry-run policy", existing: fence(v1alpha1.PhaseFailed, nil), policy: dryRun(poolPolicy(ipmiMethod)), reason: ReasonFenceRequestWaiting, typ: corev1.EventTypeWarning,
			words: []string{"recorded as a dry run of policy pool"}},
		{name: "being deleted", existing: fence(v1alpha1.PhaseFencing, leaving), reason: ReasonFenceRequestWaiting, typ: corev1.EventTypeNormal,
			words: []string{"NodeFence n1 of node n1 is being deleted", "once it is gone", "fences the node"}},
		{name: "the fence's own, under way", existing: fence(v1alpha1.PhaseFencing, own)},
		{name: "the fence's own, held", existing: fence(v1alpha1.PhaseReleased, func(nf *v1alpha1.NodeFence) { own(nf); looked(nf) })},
		{name: "the fence's own, its NodeFence being deleted", existing: fence(v1alpha1.PhaseFencing, func(nf *v1alpha1.NodeFence) { own(nf); leaving(nf) }),
			reason: ReasonFenceRequestWaiting, typ: corev1.EventTypeNormal, words: []string{"is being deleted"}},
		{name: "malformed, under way", existing: fence(v1alpha1.PhaseFencing, nil), request: " ", reason: ReasonInvalidFenceRequest, typ: corev1.EventTypeWarning,
			words: []string{"fence request ignored", "fences nothing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := tc.policy
			if policy == nil {
				policy = poolPolicy(ipmiMethod)
			}
			c, r, rec := requestWorld(t, policy, tc.existing, nil)
			text := "test"
			if tc.request != "" {
				text = tc.request
				node := &corev1.Node{}
				if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
					t.Fatal(err)
				}
				fenceRequest(text, "carol")(node)
				if err := c.Update(context.Background(), node); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				reconcileN1(t, r)
			}
			wantRequest(t, c, text, "carol")
			for _, reason := range []string{ReasonFenceRequestWaiting, ReasonInvalidFenceRequest} {
				if reason == tc.reason {
					wantSaid(t, rec, reason, tc.typ, tc.words...)
				} else {
					wantSaid(t, rec, reason, "")
				}
			}
			nf := &v1alpha1.NodeFence{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil || nf.UID != "standing-uid" {
				t.Errorf("n1's NodeFence %q (%v), want the standing one still", nf.UID, err)
			}
		})
	}
	// What the event said of a request waiting on a failed fence holds: once the NodeFence is
	// deleted, the request fences the node.
	t.Run("failed, then deleted", func(t *testing.T) {
		c, r, rec := requestWorld(t, poolPolicy(ipmiMethod), fence(v1alpha1.PhaseFailed, nil), nil)
		reconcileN1(t, r)
		if err := c.Delete(context.Background(), &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
			t.Fatal(err)
		}
		reconcileN1(t, r)
		nf := &v1alpha1.NodeFence{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil || nf.Spec.Trigger != v1alpha1.TriggerManual || nf.Spec.RequestedBy != "carol" {
			t.Errorf("n1's NodeFence after the failed one's deletion: %+v (%v); want carol's manual fence", nf.Spec, err)
		}
		if said := rec.said(ReasonFenceRequestWaiting); len(said) != 1 || !strings.Contains(said[0], "once that NodeFence is deleted") {
			t.Errorf("%s said %q, want once that the request waits for the deletion", ReasonFenceRequestWaiting, said)
		}
	})
}

// A request is answered on the API server's word: a fence's failure removes the requests it
// answered before it records the failure, and a cache still behind that removal shows the
// failed fence beside the answered request. Nothing is said of it.
func TestWaitingSaidOnTheAPIServersWord(t *testing.T) {
	failed := recoveredFence()
	failed.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFailed}
	api, r, rec := requestWorld(t, poolPolicy(ipmiMethod), failed, nil)
	node := &corev1.Node{}
	if err := api.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Annotations = nil                                      // the failure answered it
	node.Finalizers = []string{v1alpha1.FinalizerFenceOnDelete} // covered by the policy all along
	if err := api.Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	r.APIReader = api
	r.Client = interceptor.NewClient(api, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if n, ok := obj.(*corev1.Node); ok {
				requestedBy("carol", "test")(n) // the cache's copy from before the removal
			}
			return nil
		},
	})
	reconcileN1(t, r)
	wantSaid(t, rec, ReasonFenceRequestWaiting, "")
}

// An unfence request on a node whose fence is not a released one holding it changes nothing,
// and the node says so once per request: none acts on it, so it would otherwise sit there
// silently. A released fence's node is recovery's to answer.
func TestUnfenceRequestNothingActsOn(t *testing.T) {
	fence := func(phase v1alpha1.Phase, edit func(*v1alpha1.NodeFence)) *v1alpha1.NodeFence {
		nf := recoveredFence()
		nf.UID = "standing-uid"
		nf.Status = v1alpha1.NodeFenceStatus{Phase: phase}
		if edit != nil {
			edit(nf)
		}
		return nf
	}
	for _, tc := range []struct {
		name     string
		existing *v1alpha1.NodeFence
		words    []string // of the event; nil: none
	}{
		{name: "no fence", words: []string{"node n1 is not fenced", "nothing to unfence"}},
		{name: "a recovered fence", existing: recoveredFence(), words: []string{"node n1 is not fenced"}},
		{name: "a fence under way", existing: fence(v1alpha1.PhaseFencing, nil), words: []string{"NodeFence n1 is under way (phase Fencing)", ReasonStaleUnfenceRequest, "once the fence is released"}},
		{name: "a failed fence", existing: fence(v1alpha1.PhaseFailed, nil), words: []string{"NodeFence n1 failed", "acts only on a released fence", "kubectl delete nodefence n1"}},
		{name: "a dry run's record", existing: fence("", func(nf *v1alpha1.NodeFence) { nf.Spec.DryRun = true }), words: []string{"dry run", "holds nothing"}},
		{name: "a fence being deleted", existing: fence(v1alpha1.PhaseReleased, func(nf *v1alpha1.NodeFence) {
			now := metav1.NewTime(t0)
			nf.DeletionTimestamp, nf.Finalizers = &now, []string{v1alpha1.FinalizerLiftStorageFence}
		}), words: []string{"NodeFence n1 is being deleted"}},
		{name: "a released fence holding the node", existing: fence(v1alpha1.PhaseReleased, func(nf *v1alpha1.NodeFence) {
			setCondition(nf, v1alpha1.ConditionRecovered, metav1.ConditionFalse, ReasonNodeNotBack, "not back")
		})},
	} {
		for _, value := range []string{"rebooted by hand", " "} {
			reason := ReasonUnfenceRequestIgnored
			if value == " " {
				reason = ReasonInvalidUnfenceRequest
			}
			t.Run(tc.name+", "+reason, func(t *testing.T) {
				c, r, rec := requestWorld(t, poolPolicy(ipmiMethod), tc.existing, nil)
				node := &corev1.Node{}
				if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
					t.Fatal(err)
				}
				node.Annotations = nil
				confirmedClean("alice", value)(node)
				if err := c.Update(context.Background(), node); err != nil {
					t.Fatal(err)
				}
				for range 3 {
					reconcileN1(t, r)
				}
				if tc.words == nil {
					wantSaid(t, rec, reason, "")
				} else {
					wantSaid(t, rec, reason, corev1.EventTypeWarning, tc.words...)
				}
				if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
					t.Fatal(err)
				}
				if got := node.Annotations[v1alpha1.AnnotationUnfenceRequest]; got != value {
					t.Errorf("n1's unfence request %q, want %q left as it was", got, value)
				}
				want := 0
				if tc.existing != nil {
					want = 1
				}
				var list v1alpha1.NodeFenceList
				if err := c.List(context.Background(), &list); err != nil || len(list.Items) != want {
					t.Errorf("%d NodeFences (%v), want %d: the existing one alone", len(list.Items), err, want)
				}
			})
		}
	}
}

// A malformed unfence request on a released fence's node is said at once, not only once the
// node is Ready again (it hid behind NodeNotBack); the node stays held.
func TestMalformedUnfenceRequestSaidBeforeTheNodeIsBack(t *testing.T) {
	w, rec := releasedWorld(t, nil)
	nf, node := w.reconcile(t) // the first look after the release: powered off
	wantHeld(t, nf, node, ReasonNodeNotBack)
	w.setNode(t, confirmedClean("alice", "bell\x07"))
	nf, node = w.reconcile(t)
	wantHeld(t, nf, node, ReasonInvalidUnfenceRequest)
	if said := rec.said(ReasonInvalidUnfenceRequest); len(said) == 0 || !strings.Contains(said[0], "stays fenced") {
		t.Errorf("%s said %q, want the node to stay fenced", ReasonInvalidUnfenceRequest, said)
	}
	w.setNode(t, confirmedClean("alice", "reinstalled"))
	nf, node = w.reconcile(t)
	wantHeld(t, nf, node, ReasonNodeNotBack) // a valid one counts once the node is back
	w.setNode(t, back(bootAtFence))
	nf, node = w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
}
