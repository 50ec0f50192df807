package fencing

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/observe"
)

// TestPolicyReconcile reconciles policy "pool" and checks its status and events.
func TestPolicyReconcile(t *testing.T) {
	verdict := func(node, v string) v1alpha1.NodeVerdict { return v1alpha1.NodeVerdict{Node: node, Verdict: v} }
	usable := metav1.Condition{Type: v1alpha1.ConditionInvalidSpec, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSpecUsable}
	guard := func(status metav1.ConditionStatus, reason string, spec ...metav1.Condition) []metav1.Condition {
		if len(spec) == 0 {
			spec = []metav1.Condition{usable}
		}
		return append(spec, metav1.Condition{Type: v1alpha1.ConditionStormGuardActive, Status: status, Reason: reason})
	}
	invalid := func(reason string) metav1.Condition {
		return metav1.Condition{Type: v1alpha1.ConditionInvalidSpec, Status: metav1.ConditionTrue, Reason: reason}
	}
	badSelector := poolPolicy(ipmiMethod)
	badSelector.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Equals", Values: []string{"a"}}}
	badKey := poolPolicy(ipmiMethod)
	badKey.Spec.NodeSelector.MatchLabels = map[string]string{"pool a": "a"}
	selfFence := func(timeout, safeAfter time.Duration) *v1alpha1.FencingPolicy {
		m := v1alpha1.Method{Name: "self", Type: v1alpha1.MethodSelfFence, SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: safeAfter}}}
		if timeout > 0 {
			m.Timeout = &metav1.Duration{Duration: timeout}
		}
		return poolPolicy(m, ipmiMethod)
	}
	tests := []struct {
		name       string
		policy     *v1alpha1.FencingPolicy
		nodes      map[string]string // name → state, all selected
		others     map[string]string // name → state, not selected (pool=b)
		reconciles int
		want       v1alpha1.FencingPolicyStatus // ObservedGeneration aside
		wantEvents []eventSeen
	}{
		{
			name: "all healthy", policy: poolPolicy(ipmiMethod), nodes: map[string]string{"n1": healthy, "n2": healthy, "n3": healthy},
			want: v1alpha1.FencingPolicyStatus{Nodes: 3, Conditions: guard(metav1.ConditionFalse, "WithinLimit")},
		},
		{
			name: "no node selected", policy: poolPolicy(ipmiMethod), others: map[string]string{"m1": dead},
			want: v1alpha1.FencingPolicyStatus{Conditions: guard(metav1.ConditionFalse, "WithinLimit")},
		},
		{
			name: "failed and late nodes within the limit", policy: poolPolicy(ipmiMethod),
			nodes:  map[string]string{"n1": healthy, "n2": partitioned, "n3": healthy, "n4": healthy, "n5": healthy},
			others: map[string]string{"m1": dead},
			want: v1alpha1.FencingPolicyStatus{Nodes: 5, UnhealthyNodes: 1, Unhealthy: []v1alpha1.NodeVerdict{verdict("n2", "Partitioned")},
				Conditions: guard(metav1.ConditionFalse, "WithinLimit")},
		},
		{
			name: "more than the limit: the storm guard holds, and says so once", policy: withGuard(poolPolicy(ipmiMethod), "1"),
			nodes: map[string]string{"n1": dead, "n2": kubeletDown, "n3": healthy}, reconciles: 2,
			want: v1alpha1.FencingPolicyStatus{Nodes: 3, UnhealthyNodes: 2, Unhealthy: []v1alpha1.NodeVerdict{verdict("n1", "Dead"), verdict("n2", "KubeletDown")},
				Conditions: guard(metav1.ConditionTrue, "TooManyUnhealthy")},
			wantEvents: []eventSeen{{"FencingPolicy/pool", corev1.EventTypeWarning, ReasonStormGuard}},
		},
		{
			// Stored before the CRD's rule on operators, or through a path that skipped it: the
			// policy covers no node, says why, and fences nothing (nothing is observed).
			name: "a node selector that does not parse: InvalidSpec, once, and no node covered", policy: badSelector,
			nodes: map[string]string{"n1": dead, "n2": healthy}, reconciles: 2,
			want:       v1alpha1.FencingPolicyStatus{Conditions: guard(metav1.ConditionFalse, "WithinLimit", invalid(v1alpha1.ReasonNodeSelectorInvalid))},
			wantEvents: []eventSeen{{"FencingPolicy/pool", corev1.EventTypeWarning, v1alpha1.ConditionInvalidSpec}},
		},
		{
			name: "a label key no CRD rule checks", policy: badKey, nodes: map[string]string{"n1": healthy},
			want:       v1alpha1.FencingPolicyStatus{Conditions: guard(metav1.ConditionFalse, "WithinLimit", invalid(v1alpha1.ReasonNodeSelectorInvalid))},
			wantEvents: []eventSeen{{"FencingPolicy/pool", corev1.EventTypeWarning, v1alpha1.ConditionInvalidSpec}},
		},
		{
			// Stored before the CEL rule of effda44: the method can only time out. The nodes are
			// still covered and counted; the chain goes on past the method.
			name: "a SelfFence method whose default timeout does not exceed safeAfter", policy: selfFence(0, DefaultMethodTimeout),
			nodes: map[string]string{"n1": dead, "n2": healthy, "n3": healthy}, reconciles: 2,
			want: v1alpha1.FencingPolicyStatus{Nodes: 3, UnhealthyNodes: 1, Unhealthy: []v1alpha1.NodeVerdict{verdict("n1", "Dead")},
				Conditions: guard(metav1.ConditionFalse, "WithinLimit", invalid(v1alpha1.ReasonSelfFenceTimeoutTooShort))},
			wantEvents: []eventSeen{{"FencingPolicy/pool", corev1.EventTypeWarning, v1alpha1.ConditionInvalidSpec}},
		},
		{
			// Passes the CRD: the level can never be taken automatically, and says so.
			name: "a level that lists the Executor after its power-off", policy: poolPolicy(inLevel(ipmiMethod, "both"), inLevel(executorMethod, "both"), inLevel(ipmiMethod, "")),
			nodes:      map[string]string{"n1": healthy},
			want:       v1alpha1.FencingPolicyStatus{Nodes: 1, Conditions: guard(metav1.ConditionFalse, "WithinLimit", invalid(v1alpha1.ReasonAgentMethodNotFirstInLevel))},
			wantEvents: []eventSeen{{"FencingPolicy/pool", corev1.EventTypeWarning, v1alpha1.ConditionInvalidSpec}},
		},
		{
			// Stored before the CRD's patterns: each fence would fail there with BadTarget.
			name: "method settings no fence can use", policy: poolPolicy(
				v1alpha1.Method{Name: "ipmi", Type: v1alpha1.MethodIPMI, IPMI: &v1alpha1.IPMIMethod{
					CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "BMC_Creds"}}},
				v1alpha1.Method{Name: "gw", Type: v1alpha1.MethodStorageGateway, StorageGateway: &v1alpha1.StorageGatewayMethod{Gateways: []string{"10.0.9.1"},
					TLSSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "gateway-tls"}}}),
			nodes:      map[string]string{"n1": healthy},
			want:       v1alpha1.FencingPolicyStatus{Nodes: 1, Conditions: guard(metav1.ConditionFalse, "WithinLimit", invalid(v1alpha1.ReasonMethodSettingInvalid))},
			wantEvents: []eventSeen{{"FencingPolicy/pool", corev1.EventTypeWarning, v1alpha1.ConditionInvalidSpec}},
		},
		{
			name: "a level that lists the Executor first", policy: poolPolicy(inLevel(executorMethod, "both"), inLevel(ipmiMethod, "both")),
			nodes: map[string]string{"n1": healthy},
			want:  v1alpha1.FencingPolicyStatus{Nodes: 1, Conditions: guard(metav1.ConditionFalse, "WithinLimit")},
		},
		{
			name: "a SelfFence method whose timeout exceeds safeAfter", policy: selfFence(90*time.Second, 60*time.Second),
			nodes: map[string]string{"n1": healthy},
			want:  v1alpha1.FencingPolicyStatus{Nodes: 1, Conditions: guard(metav1.ConditionFalse, "WithinLimit")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, hbs := cluster(tt.nodes)
			others, otherHBs := cluster(tt.others)
			for _, o := range others {
				if n, ok := o.(*corev1.Node); ok {
					n.Labels["pool"] = "b"
				}
			}
			for name, hb := range otherHBs {
				hbs[name] = hb
			}
			objs = append(append(objs, others...), tt.policy)
			c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).WithStatusSubresource(&v1alpha1.FencingPolicy{}).Build()
			rec := &recorder{}
			r := &PolicyReconciler{Client: c, Recorder: rec, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
			for range max(tt.reconciles, 1) {
				if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "pool"}}); err != nil {
					t.Fatal(err)
				}
			}
			got := &v1alpha1.FencingPolicy{}
			if err := c.Get(ctx, client.ObjectKey{Name: "pool"}, got); err != nil {
				t.Fatal(err)
			}
			want := tt.want
			want.ObservedGeneration = got.Generation
			for i := range want.Conditions {
				want.Conditions[i].ObservedGeneration = got.Generation
			}
			opts := cmp.Options{
				cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime", "Message"),
				cmpopts.IgnoreFields(v1alpha1.NodeVerdict{}, "Reason"),
				cmpopts.IgnoreFields(v1alpha1.FencingPolicyStatus{}, "NodeSelector"), // TestBrokenSelectorEditKeepsItsNodes
				cmpopts.EquateEmpty(),
				cmpopts.SortSlices(func(a, b metav1.Condition) bool { return a.Type < b.Type }),
			}
			if diff := cmp.Diff(want, got.Status, opts); diff != "" {
				t.Errorf("policy status (-want +got):\n%s", diff)
			}
			for _, c := range got.Status.Conditions {
				if c.Message == "" || c.LastTransitionTime.IsZero() {
					t.Errorf("condition %s without a message or a transition time: %+v", c.Type, c)
				}
			}
			if diff := cmp.Diff(tt.wantEvents, rec.recorded()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// A policy's selector is recorded in its status once it parses; an edit that breaks it then
// moves none of its nodes: the policy goes on covering (and counting) the nodes of the selector
// last in force, and InvalidSpec says so. Without the record, its nodes fell to the next policy
// by name (here one that fences every node), or to none.
func TestBrokenSelectorEditKeepsItsNodes(t *testing.T) {
	objs, hbs := cluster(map[string]string{"n1": dead, "n2": healthy})
	p := poolPolicy(ipmiMethod)
	p.UID, p.Generation = "pool-uid", 1
	all := &v1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "z-all"}, Spec: v1alpha1.FencingPolicySpec{Methods: []v1alpha1.Method{ipmiMethod}}}
	c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, p, all)...).WithStatusSubresource(&v1alpha1.FencingPolicy{}).Build()
	r := &PolicyReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	reconcile := func() *v1alpha1.FencingPolicy { return reconcilePool(t, r, c) }
	got := reconcile()
	if got.Status.NodeSelector == nil || *got.Status.NodeSelector != "pool=a" {
		t.Fatalf("status.nodeSelector = %v, want pool=a", got.Status.NodeSelector)
	}

	got.Spec.NodeSelector.MatchLabels = map[string]string{"pool a": "a"} // a stray space
	got.Generation = 2
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	got = reconcile()
	if got.Status.NodeSelector == nil || *got.Status.NodeSelector != "pool=a" {
		t.Errorf("status.nodeSelector = %v after the broken edit, want pool=a kept", got.Status.NodeSelector)
	}
	if got.Status.Nodes != 2 || got.Status.UnhealthyNodes != 1 {
		t.Errorf("status counts %d nodes, %d unhealthy; want the 2 of pool=a, 1 unhealthy", got.Status.Nodes, got.Status.UnhealthyNodes)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionInvalidSpec)
	if cond == nil || cond.Reason != v1alpha1.ReasonNodeSelectorInvalid || !strings.Contains(cond.Message, `status.nodeSelector "pool=a"`) {
		t.Errorf("InvalidSpec = %+v, want NodeSelectorInvalid naming the selector still in force", cond)
	}
	for _, name := range []string{"n1", "n2"} {
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			t.Fatal(err)
		}
		if covering, err := policyFor(ctx, c, node); err != nil || covering == nil || covering.Name != "pool" {
			t.Errorf("node %s covered by %v (%v), want still pool", name, covering, err)
		}
	}
}

// A pass whose status write fails sends none of its Events: the condition it set was not
// saved, and the next pass sets it and says so again. Sent first, each failed write added one.
func TestPolicyEventsOnlyOnceTheStatusIsSaved(t *testing.T) {
	objs, hbs := cluster(map[string]string{"n1": healthy})
	p := poolPolicy(ipmiMethod)
	p.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Equals", Values: []string{"a"}}}
	base := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, p)...).WithStatusSubresource(&v1alpha1.FencingPolicy{}).Build()
	failures := 2
	c := interceptor.NewClient(base, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if failures > 0 {
				failures--
				return errors.New("the API server timed out")
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	rec := &recorder{}
	r := &PolicyReconciler{Client: c, Recorder: rec, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	for i := range 4 {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "pool"}})
		if (err != nil) != (i < 2) {
			t.Fatalf("pass %d: error %v", i, err)
		}
	}
	if got := rec.said(v1alpha1.ConditionInvalidSpec); len(got) != 1 {
		t.Errorf("%d InvalidSpec events over two failed passes and two saved ones, want 1", len(got))
	}
}

// reconcilePool runs one pass of r over policy "pool" and reads the policy back.
func reconcilePool(t *testing.T, r *PolicyReconciler, c client.Client) *v1alpha1.FencingPolicy {
	t.Helper()
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "pool"}}); err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.FencingPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: "pool"}, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// A storm guard the CRD's rule refuses (a policy stored before it) is said by InvalidSpec: no
// failed node is fenced automatically until it is fixed. A valid one is no problem.
func TestInvalidStormGuardSaid(t *testing.T) {
	for guard, invalid := range map[string]bool{"150%": true, "forty": true, "1000001": true, "-1": true, "100%": false, "0": false, "1000000": false} {
		p := poolPolicy(ipmiMethod)
		p.Spec.StormGuard.MaxUnhealthy = intOrPct(guard)
		c := invalidSpecCondition(p)
		if got := c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonStormGuardInvalid; got != invalid {
			t.Errorf("maxUnhealthy %s: InvalidSpec %s %s %q, want invalid %t", guard, c.Status, c.Reason, c.Message, invalid)
		}
		if invalid && !strings.Contains(c.Message, "no failed node of the policy is fenced automatically") {
			t.Errorf("maxUnhealthy %s: message %q does not say what it holds", guard, c.Message)
		}
	}
}

// TestInvalidSpecMessage: the condition names every problem, the method it is in and what to
// change, and its reason is the first problem's.
func TestInvalidSpecMessage(t *testing.T) {
	p := poolPolicy(
		v1alpha1.Method{Name: "self-a", Type: v1alpha1.MethodSelfFence, Timeout: &metav1.Duration{Duration: 30 * time.Second},
			SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 30 * time.Second}}},
		v1alpha1.Method{Name: "self-b", Type: v1alpha1.MethodSelfFence, Timeout: &metav1.Duration{Duration: 31 * time.Second},
			SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 30 * time.Second}}},
		ipmiMethod)
	p.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn}}
	p.Spec.Workloads = &v1alpha1.Workloads{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Exists", Values: []string{"data"}}}}}
	c := invalidSpecCondition(p)
	if c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonNodeSelectorInvalid {
		t.Fatalf("condition = %+v, want True with %s first", c, v1alpha1.ReasonNodeSelectorInvalid)
	}
	for _, want := range []string{"spec.nodeSelector does not parse", "covers no node", "spec.workloads.podSelector", "no failed node of the policy is fenced automatically", "method self-a", "30s", "raise timeout or lower safeAfter"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
	if strings.Contains(c.Message, "self-b") {
		t.Errorf("message %q names method self-b, whose timeout exceeds its safeAfter", c.Message)
	}
}

// inLevel is m in level; outside any level ("") it is renamed "<name>-alone", so that a chain
// may hold it twice.
func inLevel(m v1alpha1.Method, level string) v1alpha1.Method {
	m.Level = level
	if level == "" {
		m.Name += "-alone"
	}
	return m
}

// A policy named before another whose selector matches the other's nodes takes them (the first
// policy by name covers a node): the one left without them says so, with an Overlapping
// condition and a Warning event naming the policy and the count, instead of only a smaller
// status.nodes. The one that covers them has no such condition.
func TestPolicyOverlapIsSaid(t *testing.T) {
	objs, hbs := cluster(map[string]string{"n1": healthy, "n2": healthy, "n3": healthy})
	audit := poolPolicy(ipmiMethod)
	audit.Name, audit.Spec.DryRun = "audit", true
	audit.Spec.NodeSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpExists}}}
	c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, audit, poolPolicy(ipmiMethod))...).
		WithStatusSubresource(&v1alpha1.FencingPolicy{}).Build()
	rec := &recorder{}
	r := &PolicyReconciler{Client: c, Recorder: rec, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	for _, name := range []string{"pool", "audit"} {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	got := &v1alpha1.FencingPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: "pool"}, got); err != nil {
		t.Fatal(err)
	}
	o := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionOverlapping)
	if got.Status.Nodes != 0 || o == nil || o.Status != metav1.ConditionTrue || o.Reason != v1alpha1.ReasonNodesTaken ||
		!strings.Contains(o.Message, "3 nodes that its node selector matches are covered") || !strings.Contains(o.Message, "3 by policy audit") {
		t.Errorf("policy pool: nodes %d, Overlapping %+v; want 0 nodes and True naming audit's 3", got.Status.Nodes, o)
	}
	if said := rec.said(v1alpha1.ReasonNodesTaken); len(said) != 1 {
		t.Errorf("%d %s events, want 1: %v", len(said), v1alpha1.ReasonNodesTaken, said)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "audit"}, got); err != nil {
		t.Fatal(err)
	}
	if o := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionOverlapping); got.Status.Nodes != 3 || o != nil {
		t.Errorf("policy audit: nodes %d, Overlapping %+v; want 3 nodes and no such condition", got.Status.Nodes, o)
	}
}

// The InvalidSpec message names each setting no fence can use and why.
func TestMethodSettingProblemSaysWhich(t *testing.T) {
	vc := v1alpha1.Method{Name: "vc", Type: v1alpha1.MethodVSphere, VSphere: &v1alpha1.VSphereMethod{Server: "https://vc.example.com",
		CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "BMC_Creds"}}}
	got := methodSettingProblem(vc)
	for _, want := range []string{"method vc", `vsphere.server "https://vc.example.com"`, `Secret name "BMC_Creds"`} {
		if !strings.Contains(got, want) {
			t.Errorf("methodSettingProblem = %q, want it to say %q", got, want)
		}
	}
	for _, ok := range []v1alpha1.Method{ipmiMethod, executorMethod,
		{Name: "vc", Type: v1alpha1.MethodVSphere, VSphere: &v1alpha1.VSphereMethod{Server: "[fd00::1]:443", CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "ns", Name: "vc.creds"}}},
		{Name: "vc6", Type: v1alpha1.MethodVSphere, VSphere: &v1alpha1.VSphereMethod{Server: "fd00::1", CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "ns", Name: "vc"}}},
		{Name: "gw", Type: v1alpha1.MethodStorageGateway, StorageGateway: &v1alpha1.StorageGatewayMethod{Gateways: []string{"gw.example.com:9446", "[fd00::2]:9446"},
			TLSSecretRef: v1alpha1.SecretReference{Namespace: "ns", Name: "tls"}}}} {
		if got := methodSettingProblem(ok); got != "" {
			t.Errorf("methodSettingProblem(%s) = %q, want none", ok.Name, got)
		}
	}
}
