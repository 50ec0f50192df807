package fencing

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/observe"
)

// recoveredFence is n1's NodeFence of carol's manual request "disk errors", ended Recovered.
func recoveredFence() *v1alpha1.NodeFence {
	at := metav1.NewTime(t0.Add(-time.Second))
	return &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{v1alpha1.LabelNode: "n1"}},
		Spec: v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerManual, Reason: "disk errors",
			RequestedBy: "carol", Methods: []v1alpha1.Method{ipmiMethod}},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRecovered,
			Recovery: &v1alpha1.RecoveryRecord{How: v1alpha1.RecoveryRebooted, Time: at, RecoveredTime: &at}}}
}

// Recovery removes the answered request from the Node before it records the fence Recovered,
// so the recovery's event can wake the node reconciler while its cache still shows the Node
// with the request. A fence is made from a request only once the API server's copy of the Node
// confirms it: otherwise the node just given back would be powered off again.
func TestRequestConfirmedOnTheAPIServer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		onTheAPI  bool // the API server's copy of n1 still carries the request (the cache's does)
		wantFence bool
	}{
		{name: "the cache alone still shows the answered request", onTheAPI: false, wantFence: false},
		{name: "the request is on the API server's copy too", onTheAPI: true, wantFence: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, hbs := cluster(map[string]string{"n1": healthy, "n2": healthy})
			for _, o := range objs {
				if n, ok := o.(*corev1.Node); ok && n.Name == "n1" {
					n.Finalizers = []string{v1alpha1.FinalizerFenceOnDelete} // covered by the policy all along
					if tc.onTheAPI {
						requestedBy("carol", "disk errors")(n)
					}
				}
			}
			objs = append(objs, poolPolicy(ipmiMethod), recoveredFence())
			api := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
				WithStatusSubresource(&v1alpha1.NodeFence{})).Build()
			cache := interceptor.NewClient(api.(client.WithWatch), interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if err := c.Get(ctx, key, obj, opts...); err != nil {
						return err
					}
					if n, ok := obj.(*corev1.Node); ok && n.Name == "n1" && n.Annotations[v1alpha1.AnnotationFenceRequest] == "" {
						requestedBy("carol", "disk errors")(n) // the copy from before the recovery's write
					}
					return nil
				},
			})
			rec := &recorder{}
			r := &NodeReconciler{Client: cache, APIReader: api, Recorder: rec, Observer: observe.Observer{Reader: api, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			nf := &v1alpha1.NodeFence{}
			if err := api.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
				t.Fatal(err)
			}
			if fenced := nf.Status.Phase != v1alpha1.PhaseRecovered; fenced != tc.wantFence {
				t.Errorf("n1's NodeFence: phase %q, trigger %s, reason %q; want a new fence: %v", nf.Status.Phase, nf.Spec.Trigger, nf.Spec.Reason, tc.wantFence)
			}
			if tc.wantFence && (nf.Spec.Trigger != v1alpha1.TriggerManual || nf.Spec.RequestedBy != "carol" || nf.Spec.PreviousRecoveryTime == nil) {
				t.Errorf("new fence %+v, want carol's manual fence recording the last recovery", nf.Spec)
			}
		})
	}
}

// requestWorld is healthy n1 carrying carol's request "test", under policy (nil: none) and with
// existing (nil: no NodeFence), and a reconciler over c, which edit may wrap.
func requestWorld(t *testing.T, policy *v1alpha1.FencingPolicy, existing *v1alpha1.NodeFence, edit func(client.WithWatch) client.WithWatch) (client.WithWatch, *NodeReconciler, *recorder) {
	t.Helper()
	objs, hbs := cluster(map[string]string{"n1": healthy})
	requestedBy("carol", "test")(objs[0].(*corev1.Node))
	if policy != nil {
		objs = append(objs, policy)
	}
	if existing != nil {
		objs = append(objs, existing)
	}
	c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
	if edit != nil {
		c = edit(c)
	}
	rec := &recorder{}
	return c, &NodeReconciler{Client: c, Recorder: rec, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}, rec
}

func reconcileN1(t *testing.T, r *NodeReconciler) {
	t.Helper()
	if _, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
}

// wantRequest checks n1's fence request and its requester ("" for neither).
func wantRequest(t *testing.T, c client.Client, text, by string) {
	t.Helper()
	node := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	got, ok := node.Annotations[v1alpha1.AnnotationFenceRequest]
	gotBy, okBy := node.Annotations[v1alpha1.AnnotationFenceRequestedBy]
	if ok != (text != "") || got != text || okBy != (by != "") || gotBy != by {
		t.Errorf("n1's fence request %q (present %v) by %q (present %v), want %q by %q", got, ok, gotBy, okBy, text, by)
	}
}

// wantSaid checks the events recorded with reason: one, on n1, of type typ, its message
// containing each of words; none when typ is "".
func wantSaid(t *testing.T, rec *recorder, reason, typ string, words ...string) {
	t.Helper()
	var seen []eventSeen
	for _, e := range rec.recorded() {
		if e.Reason == reason {
			seen = append(seen, e)
		}
	}
	if typ == "" {
		if len(seen) > 0 {
			t.Errorf("events %s: %q, want none", reason, rec.said(reason))
		}
		return
	}
	if len(seen) != 1 || seen[0] != (eventSeen{"Node/n1", typ, reason}) {
		t.Errorf("events %s: %v, want one %s on Node/n1", reason, seen, typ)
		return
	}
	for _, w := range words {
		if msg := rec.said(reason)[0]; !strings.Contains(msg, w) {
			t.Errorf("event %s %q does not say %q", reason, msg, w)
		}
	}
}

// A request is acted on once. Under a dry-run policy it is recorded as a dry run and removed
// from the Node, so that turning the policy's dryRun off later does not power the node off for
// a request its requester was told fenced nothing. So is one made while a dry run's record
// stands.
func TestDryRunRequestActedOnOnce(t *testing.T) {
	detected := recoveredFence()
	detected.Status = v1alpha1.NodeFenceStatus{}
	detected.Spec.DryRun, detected.Spec.Trigger, detected.Spec.Reason, detected.Spec.RequestedBy = true, v1alpha1.TriggerDetected, "Dead: earlier", ""
	for _, tc := range []struct {
		name       string
		existing   *v1alpha1.NodeFence
		wantReason string // the dry run's record's
	}{
		{name: "recorded as a dry run", wantReason: "test"},
		{name: "made while a dry run's record stands", existing: detected, wantReason: "Dead: earlier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, r, rec := requestWorld(t, dryRun(poolPolicy(ipmiMethod)), tc.existing, nil)
			reconcileN1(t, r)
			wantRequest(t, c, "", "")
			wantSaid(t, rec, ReasonFenceRequestDryRun, corev1.EventTypeNormal, `"test"`, "carol", "dry run", "removed")
			p := &v1alpha1.FencingPolicy{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "pool"}, p); err != nil {
				t.Fatal(err)
			}
			p.Spec.DryRun = false
			if err := c.Update(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			reconcileN1(t, r) // a policy's change wakes every node
			nf := &v1alpha1.NodeFence{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
				t.Fatal(err)
			}
			if !nf.Spec.DryRun || nf.Spec.Reason != tc.wantReason {
				t.Errorf("after dryRun: false, n1's NodeFence is %s %q (dry run: %v); want the dry run's record %q still, no real fence",
					nf.Spec.Trigger, nf.Spec.Reason, nf.Spec.DryRun, tc.wantReason)
			}
		})
	}
}

// A request for a node no policy covers is removed with a Warning that says nothing was fenced:
// a policy created later to select the node does not act on it.
func TestRequestWithoutPolicyActedOnOnce(t *testing.T) {
	c, r, rec := requestWorld(t, nil, nil, nil)
	reconcileN1(t, r)
	wantRequest(t, c, "", "")
	wantSaid(t, rec, ReasonNoPolicy, corev1.EventTypeWarning, `"test"`, "carol", "no FencingPolicy", "nothing was fenced", "removed")
	if err := c.Create(context.Background(), poolPolicy(ipmiMethod)); err != nil {
		t.Fatal(err)
	}
	reconcileN1(t, r)
	checkFence(t, c, nil, "")
}

// The removal takes away only the request that was judged: one written between the judgement
// and the removal survives, and is judged in turn.
func TestNewerRequestSurvivesTheRemoval(t *testing.T) {
	for _, tc := range []struct {
		name        string
		policy      *v1alpha1.FencingPolicy
		reason, typ string // the removal's event
	}{
		{"no policy", nil, ReasonNoPolicy, corev1.EventTypeWarning},
		{"a dry-run policy", dryRun(poolPolicy(ipmiMethod)), ReasonFenceRequestDryRun, corev1.EventTypeNormal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interleaved := false
			newer := func(c client.WithWatch) client.WithWatch {
				return interceptor.NewClient(c, interceptor.Funcs{
					Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
						if _, isNode := obj.(*corev1.Node); isNode && !interleaved {
							interleaved = true
							node := &corev1.Node{}
							if err := c.Get(ctx, client.ObjectKeyFromObject(obj), node); err != nil {
								return err
							}
							requestedBy("dave", "newer")(node)
							node.ManagedFields = nil
							if err := c.Update(ctx, node); err != nil {
								return err
							}
						}
						return c.Patch(ctx, obj, patch, opts...)
					},
				})
			}
			c, r, rec := requestWorld(t, tc.policy, nil, newer)
			reconcileN1(t, r)
			if !interleaved {
				t.Fatal("the request was not removed: nothing to write a newer request before")
			}
			wantRequest(t, c, "newer", "dave")
			wantSaid(t, rec, tc.reason, "")
			reconcileN1(t, r) // the newer request's write wakes the node
			wantRequest(t, c, "", "")
			wantSaid(t, rec, tc.reason, tc.typ, `"newer"`, "dave")
		})
	}
}

// A request is dropped on the API server's word about the node's policy, not the cache's: a
// policy created, or turned to fence for real, a moment before the request would otherwise see
// its request removed ("no policy", "dry run") while the CLI, which read the API server, said
// the node would be fenced. While the two differ nothing is decided; once the cache has caught
// up the request fences the node.
func TestRequestKeptWhileTheCacheLagsThePolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cached func(*v1alpha1.FencingPolicyList) // what the lagging cache shows of the policies
	}{
		{"a policy created a moment ago", func(l *v1alpha1.FencingPolicyList) { l.Items = nil }},
		{"a policy turned to fence for real a moment ago", func(l *v1alpha1.FencingPolicyList) {
			for i := range l.Items {
				l.Items[i].Spec.DryRun = true
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, r, rec := requestWorld(t, poolPolicy(ipmiMethod), nil, nil)
			r.APIReader = api
			r.Client = interceptor.NewClient(api, interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if err := c.List(ctx, list, opts...); err != nil {
						return err
					}
					if l, ok := list.(*v1alpha1.FencingPolicyList); ok {
						tc.cached(l)
					}
					return nil
				},
			})
			reconcileN1(t, r)
			wantRequest(t, api, "test", "carol")
			wantSaid(t, rec, ReasonNoPolicy, "")
			wantSaid(t, rec, ReasonFenceRequestDryRun, "")
			if err := api.Get(context.Background(), client.ObjectKey{Name: "n1"}, &v1alpha1.NodeFence{}); !apierrors.IsNotFound(err) {
				t.Fatalf("a NodeFence was made from the lagging cache (%v)", err)
			}
			r.Client = api // the cache caught up
			reconcileN1(t, r)
			nf := &v1alpha1.NodeFence{}
			if err := api.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil || nf.Spec.DryRun || nf.Spec.Trigger != v1alpha1.TriggerManual {
				t.Fatalf("n1's NodeFence %+v (%v), want a real manual fence", nf.Spec, err)
			}
		})
	}
}

// A request under a dry-run policy is removed only once its dry run is recorded: while the
// node's previous NodeFence is still on its way out (a finalizer holds it), no record can be
// made, and the request waits for it instead of being said recorded.
func TestDryRunRequestWaitsForTheRecord(t *testing.T) {
	leaving := recoveredFence()
	now := metav1.NewTime(t0)
	leaving.DeletionTimestamp, leaving.Finalizers = &now, []string{v1alpha1.FinalizerLiftStorageFence}
	c, r, rec := requestWorld(t, dryRun(poolPolicy(ipmiMethod)), leaving, nil)
	reconcileN1(t, r)
	wantRequest(t, c, "test", "carol")
	wantSaid(t, rec, ReasonFenceRequestDryRun, "")
}
