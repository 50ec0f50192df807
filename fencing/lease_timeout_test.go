package fencing

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
)

// kubeletNode is node name, labelled pool, and its Lease of duration secs (the kubelet renews
// every quarter of it), last renewed ago before t0.
func kubeletNode(name, pool string, secs int32, ago time.Duration) []client.Object {
	renew := metav1.NewMicroTime(t0.Add(-ago))
	return []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: name},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(secs), RenewTime: &renew}},
	}
}

// withLeaseTimeout sets the policy's detection.leaseTimeout.
func withLeaseTimeout(p *v1alpha1.FencingPolicy, d time.Duration) *v1alpha1.FencingPolicy {
	p.Spec.Detection.LeaseTimeout = &metav1.Duration{Duration: d}
	return p
}

// TestShortLeaseTimeoutFencesNoHealthyNode: under leaseTimeout 5s, a node whose kubelet renews
// every 10 s (the default) and renewed 7 s ago is judged with two of its intervals, 20 s, and is
// neither powered off as Dead (no agent) nor has its workload killed as Partitioned (a fresh
// agent); its next look is at that Lease's expiry plus 20s/10. A kubelet tuned to renew every
// 2.5 s keeps the 5 s, and its node, silent 7 s, is fenced.
func TestShortLeaseTimeoutFencesNoHealthyNode(t *testing.T) {
	fresh := agentwire.Heartbeat{Node: "n1", Interval: time.Second, Received: t0.Add(-100 * time.Millisecond), KubeletHealthy: true}
	tests := []struct {
		name      string
		secs      int32 // the Lease's duration: the kubelet renews every quarter of it
		agent     bool
		want      *v1alpha1.NodeFenceSpec // nil: none
		wantAgain time.Duration           // the look asked for, when not fenced
	}{
		{name: "kubelet every 10s, no agent: not Dead", secs: 40, wantAgain: 13*time.Second + 50*time.Millisecond + 2*time.Second},
		{name: "kubelet every 10s, fresh agent: not Partitioned", secs: 40, agent: true, wantAgain: 13*time.Second + 50*time.Millisecond + 2*time.Second},
		{name: "kubelet tuned to every 2.5s, no agent: Dead past 5s", secs: 10,
			want: &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: string(detectors.Dead), Methods: []v1alpha1.Method{ipmiMethod}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hbs := heartbeats{}
			if tt.agent {
				hbs["n1"] = fresh
			}
			p := withLeaseTimeout(withGuard(poolPolicy(executorMethod, ipmiMethod), "100%"), 5*time.Second)
			objs := append(kubeletNode("n1", "a", tt.secs, 7*time.Second), p)
			c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
			r := &NodeReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
			res, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
			if err != nil {
				t.Fatal(err)
			}
			checkFence(t, c, tt.want, "")
			if tt.want == nil && res.RequeueAfter != tt.wantAgain {
				t.Errorf("look again in %s, want %s: the raised timeout's expiry and a tenth of it", res.RequeueAfter, tt.wantAgain)
			}
		})
	}
}

// TestLeaseTimeoutRaisedCondition: a policy whose leaseTimeout is shorter than two renewal
// intervals of some of its nodes' kubelets says how many, how slow, the timeout they are judged
// with and what to set, with one Warning Event; the condition goes once the timeout is raised.
// Nodes of another policy are not counted, nor is a tuned kubelet that fits the timeout.
func TestLeaseTimeoutRaisedCondition(t *testing.T) {
	var objs []client.Object
	objs = append(objs, kubeletNode("n1", "a", 40, 7*time.Second)...)  // every 10s
	objs = append(objs, kubeletNode("n2", "a", 40, 3*time.Second)...)  // every 10s
	objs = append(objs, kubeletNode("n3", "a", 10, time.Second)...)    // every 2.5s: fits 5s
	objs = append(objs, kubeletNode("m1", "b", 120, 7*time.Second)...) // another policy's
	objs = append(objs, withLeaseTimeout(poolPolicy(ipmiMethod), 5*time.Second))
	c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).WithStatusSubresource(&v1alpha1.FencingPolicy{}).Build()
	rec := &recorder{}
	r := &PolicyReconciler{Client: c, Recorder: rec, Observer: observe.Observer{Reader: c}, Now: func() time.Time { return t0 }}
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	reconcile := func() *v1alpha1.FencingPolicy { return reconcilePool(t, r, c) }

	reconcile()
	p := reconcile()
	if p.Status.Nodes != 3 || p.Status.UnhealthyNodes != 0 {
		t.Errorf("%d nodes, %d unhealthy (%+v), want 3 and none: each is judged with its own kubelet's intervals", p.Status.Nodes, p.Status.UnhealthyNodes, p.Status.Unhealthy)
	}
	cond := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionLeaseTimeoutRaised)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonShorterThanTwoRenewals {
		t.Fatalf("condition %s = %+v, want True with %s", v1alpha1.ConditionLeaseTimeoutRaised, cond, v1alpha1.ReasonShorterThanTwoRenewals)
	}
	for _, want := range []string{"2 of 3 nodes", "less often than every 2.5s", "the slowest every 10s", "leaseTimeout 5s", "(20s for the slowest)",
		"set leaseTimeout to 20s or more", "nodeLeaseDurationSeconds to 10 or less"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("message %q lacks %q", cond.Message, want)
		}
	}
	raised := []eventSeen{{"FencingPolicy/pool", corev1.EventTypeWarning, v1alpha1.ConditionLeaseTimeoutRaised}}
	if diff := cmp.Diff(raised, rec.recorded()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	p.Spec.Detection.LeaseTimeout.Duration = 20 * time.Second
	if err := c.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	p = reconcile()
	if cond := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionLeaseTimeoutRaised); cond != nil {
		t.Errorf("condition %+v after leaseTimeout 20s, want none", cond)
	}
	if diff := cmp.Diff(raised, rec.recorded()); diff != "" {
		t.Errorf("events after the fix (-want +got):\n%s", diff)
	}
}
