package fencing

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
)

// t0 is the clock of the decision tests.
var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// heartbeats is the agents' channel as the detectors read it.
type heartbeats map[string]agentwire.Heartbeat

func (h heartbeats) Snapshot() map[string]agentwire.Heartbeat { return h }
func (h heartbeats) Latest(node string) (agentwire.Heartbeat, []agentwire.Sighting, bool) {
	return agentwire.LatestOf(h, node)
}
func (h heartbeats) EachReceived(fn func(string, time.Time, time.Duration)) {
	agentwire.EachReceivedOf(h, fn)
}
func (h heartbeats) LastReached(node string) time.Time { return agentwire.LastReachedOf(h, node) }

func (h heartbeats) Forget(node string) { delete(h, node) }

// eventSeen is one recorded event: the kind and name it regards, its type and reason.
type eventSeen struct{ On, Type, Reason string }

// recorder keeps the events the reconcilers record.
type recorder struct {
	mu       sync.Mutex
	events   []eventSeen
	messages []string // each event's message, in the same order
}

func (r *recorder) Eventf(regarding, _ runtime.Object, typ, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	on := reflect.TypeOf(regarding).Elem().Name()
	if o, ok := regarding.(client.Object); ok {
		on += "/" + o.GetName()
	}
	r.events = append(r.events, eventSeen{On: on, Type: typ, Reason: reason})
	r.messages = append(r.messages, fmt.Sprintf(note, args...))
}

// said is the messages of the events recorded with reason.
func (r *recorder) said(reason string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i, e := range r.events {
		if e.Reason == reason {
			out = append(out, r.messages[i])
		}
	}
	return out
}

func (r *recorder) recorded() []eventSeen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events
}

// The states a node of the decision tests can be in, as its Lease and its agent tell.
const (
	healthy     = "healthy"      // Lease renewed a second ago, no agent
	dead        = "dead"         // Lease a minute old (timeout 20s), no agent
	partitioned = "partitioned"  // Lease a minute old, agent heartbeats fresh, kubelet healthy
	kubeletDown = "kubelet-down" // Lease a minute old, agent heartbeats fresh, kubelet down
)

// cluster is the API objects and agent heartbeats of nodes in the given states, all labelled
// pool=a.
func cluster(states map[string]string) ([]client.Object, heartbeats) {
	var objs []client.Object
	hbs := heartbeats{}
	for name, state := range states {
		age := time.Second
		if state != healthy {
			age = time.Minute
		}
		renew := metav1.NewMicroTime(t0.Add(-age))
		objs = append(objs,
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "a"}}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: name}, Spec: coordinationv1.LeaseSpec{RenewTime: &renew}})
		if state == partitioned || state == kubeletDown {
			hbs[name] = agentwire.Heartbeat{Node: name, Interval: time.Second, Received: t0.Add(-100 * time.Millisecond), KubeletHealthy: state == partitioned}
		}
	}
	return objs, hbs
}

var (
	ipmiMethod = v1alpha1.Method{Name: "ipmi", Type: v1alpha1.MethodIPMI,
		IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "bmc"}}}
	executorMethod = v1alpha1.Method{Name: "executor", Type: v1alpha1.MethodExecutor}
)

// poolPolicy is the policy "pool" over the nodes labelled pool=a, with the given chain.
func poolPolicy(methods ...v1alpha1.Method) *v1alpha1.FencingPolicy {
	return &v1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: v1alpha1.FencingPolicySpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			Methods:      methods,
			Release:      v1alpha1.Release{},
		},
	}
}

func withGuard(p *v1alpha1.FencingPolicy, maxUnhealthy string) *v1alpha1.FencingPolicy {
	p.Spec.StormGuard.MaxUnhealthy = intOrPct(maxUnhealthy)
	return p
}

func dryRun(p *v1alpha1.FencingPolicy) *v1alpha1.FencingPolicy {
	p.Spec.DryRun = true
	return p
}

// requestedBy makes n1's annotations a manual fence request that the API server recorded as
// set by user (""; none recorded), sent under a field manager that names someone else.
func requestedBy(user, reason string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Annotations = map[string]string{v1alpha1.AnnotationFenceRequest: reason}
		if user != "" {
			n.Annotations[v1alpha1.AnnotationFenceRequestedBy] = user
		}
		raw := `{"f:metadata":{"f:annotations":{"f:` + v1alpha1.AnnotationFenceRequest + `":{}}}}`
		n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "forged-manager", Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}}}
	}
}

func created(on string) []eventSeen {
	return []eventSeen{{"Node/" + on, corev1.EventTypeWarning, ReasonFenceCreated}, {"NodeFence/" + on, corev1.EventTypeNormal, ReasonFenceCreated}}
}

// TestNodeReconcile reconciles node n1 once and checks the NodeFence it leads to (or none) and
// the events recorded.
func TestNodeReconcile(t *testing.T) {
	earlier := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{v1alpha1.LabelNode: "n1"}},
		Spec: v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerManual, Reason: "an earlier fence", Methods: []v1alpha1.Method{ipmiMethod}}}
	recoveredAt := metav1.NewTime(t0.Add(-10 * time.Minute))
	recovered := earlier.DeepCopy()
	recovered.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRecovered,
		Recovery: &v1alpha1.RecoveryRecord{How: v1alpha1.RecoveryRebooted, Time: metav1.NewTime(t0.Add(-11 * time.Minute)), RecoveredTime: &recoveredAt}}
	failedFence := earlier.DeepCopy()
	failedFence.Status.Phase = v1alpha1.PhaseFailed
	releasedFence := earlier.DeepCopy()
	releasedFence.Status.Phase = v1alpha1.PhaseReleased
	dryRunRecord := earlier.DeepCopy()
	dryRunRecord.Spec.DryRun, dryRunRecord.Spec.Trigger, dryRunRecord.Spec.Verdict = true, v1alpha1.TriggerDetected, "Dead"
	tests := []struct {
		name       string
		policy     *v1alpha1.FencingPolicy // nil: none
		nodes      map[string]string       // name → state; n1 is reconciled
		editN1     func(*corev1.Node)
		existing   *v1alpha1.NodeFence
		want       *v1alpha1.NodeFenceSpec // n1's NodeFence afterwards, Reason aside; nil: none
		wantReason string                  // its Reason's beginning
		wantEvents []eventSeen
	}{
		{
			name: "a healthy node is left alone", policy: poolPolicy(ipmiMethod), nodes: map[string]string{"n1": healthy},
		},
		{
			name: "a dead node is fenced with the policy's methods but the executor", policy: poolPolicy(executorMethod, ipmiMethod),
			nodes: map[string]string{"n1": dead, "n2": healthy, "n3": healthy},
			want: &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead",
				Methods: []v1alpha1.Method{ipmiMethod}},
			wantReason: "Dead: ", wantEvents: created("n1"),
		},
		{
			name: "a dry-run policy's fence says so", policy: dryRun(poolPolicy(ipmiMethod)), nodes: map[string]string{"n1": dead},
			want: &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead",
				Methods: []v1alpha1.Method{ipmiMethod}, DryRun: true},
			wantReason: "Dead: ", wantEvents: created("n1"),
		},
		{
			name: "a dead node whose chain needs its agent is not fenced", policy: poolPolicy(executorMethod), nodes: map[string]string{"n1": dead},
			wantEvents: []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonNoMethod}},
		},
		{
			name: "the storm guard holds when more nodes look failed than it allows", policy: withGuard(poolPolicy(ipmiMethod), "1"),
			nodes:      map[string]string{"n1": dead, "n2": dead, "n3": healthy},
			wantEvents: []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonStormGuard}},
		},
		{
			name: "the storm guard lets as many as it allows through", policy: withGuard(poolPolicy(ipmiMethod), "2"),
			nodes: map[string]string{"n1": dead, "n2": dead, "n3": healthy},
			want: &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead",
				Methods: []v1alpha1.Method{ipmiMethod}},
			wantReason: "Dead: ", wantEvents: created("n1"),
		},
		{
			name: "an existing fence is left to its reconciler", policy: poolPolicy(ipmiMethod), nodes: map[string]string{"n1": dead},
			existing: earlier, want: &earlier.Spec, wantReason: earlier.Spec.Reason,
		},
		{
			name: "a failed fence stands", policy: poolPolicy(ipmiMethod), nodes: map[string]string{"n1": dead},
			existing: failedFence, want: &earlier.Spec, wantReason: earlier.Spec.Reason,
		},
		{
			name: "a released fence whose node is not recovered stands", policy: poolPolicy(ipmiMethod), nodes: map[string]string{"n1": dead},
			existing: releasedFence, want: &earlier.Spec, wantReason: earlier.Spec.Reason,
		},
		{
			name: "a recovered node that fails again gets a new fence, which records the recovery", policy: poolPolicy(ipmiMethod),
			nodes: map[string]string{"n1": dead, "n2": healthy, "n3": healthy}, existing: recovered,
			want: &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead",
				Methods: []v1alpha1.Method{ipmiMethod}, PreviousRecoveryTime: &recoveredAt},
			wantReason: "Dead: ", wantEvents: created("n1"),
		},
		{
			name: "a dry run's record stands while the policy stays in dry run", policy: dryRun(poolPolicy(ipmiMethod)),
			nodes: map[string]string{"n1": dead}, existing: dryRunRecord, want: &dryRunRecord.Spec, wantReason: earlier.Spec.Reason,
		},
		{
			name: "a dry run's record gives way to a real fence once the policy fences for real", policy: poolPolicy(ipmiMethod),
			nodes: map[string]string{"n1": dead, "n2": healthy, "n3": healthy}, existing: dryRunRecord,
			want: &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead",
				Methods: []v1alpha1.Method{ipmiMethod}},
			wantReason: "Dead: ", wantEvents: created("n1"),
		},
		{
			name: "a dry run's record of a healthy node goes only when a fence replaces it", policy: poolPolicy(ipmiMethod),
			nodes: map[string]string{"n1": healthy}, existing: dryRunRecord, want: &dryRunRecord.Spec, wantReason: earlier.Spec.Reason,
		},
		{
			name: "a recovered node that stays healthy keeps its recovered fence", policy: poolPolicy(ipmiMethod),
			nodes: map[string]string{"n1": healthy}, existing: recovered, want: &earlier.Spec, wantReason: earlier.Spec.Reason,
		},
		{
			name: "a dead node no policy selects is left alone", nodes: map[string]string{"n1": dead},
		},
		{
			name: "a partitioned node is not powered off blindly", policy: poolPolicy(ipmiMethod), nodes: map[string]string{"n1": partitioned},
			wantEvents: []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonAliveNotFencing}},
		},
		{
			name: "a node whose kubelet is down is not powered off blindly", policy: poolPolicy(ipmiMethod), nodes: map[string]string{"n1": kubeletDown},
			wantEvents: []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonAliveNotFencing}},
		},
		{
			name: "a partitioned node is fenced by a chain that starts with the executor", policy: poolPolicy(executorMethod, ipmiMethod),
			nodes: map[string]string{"n1": partitioned, "n2": healthy, "n3": healthy},
			want: &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Partitioned",
				Methods: []v1alpha1.Method{executorMethod, ipmiMethod}},
			wantReason: "Partitioned: ", wantEvents: created("n1"),
		},
		{
			name: "a manual request fences a healthy node with the whole chain", policy: poolPolicy(executorMethod, ipmiMethod),
			nodes: map[string]string{"n1": healthy}, editN1: requestedBy("alice@example.com", "disk controller on fire"),
			want: &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerManual, RequestedBy: "alice@example.com",
				Methods: []v1alpha1.Method{executorMethod, ipmiMethod}},
			wantReason: "disk controller on fire", wantEvents: created("n1"),
		},
		{
			name: "a manual request passes the storm guard", policy: withGuard(poolPolicy(ipmiMethod), "0"),
			nodes: map[string]string{"n1": dead, "n2": dead}, editN1: requestedBy("admin", "maintenance"),
			want: &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerManual, RequestedBy: "admin",
				Methods: []v1alpha1.Method{ipmiMethod}},
			wantReason: "maintenance", wantEvents: created("n1"),
		},
		{
			name: "a request with no recorded requester names none", policy: poolPolicy(ipmiMethod),
			nodes: map[string]string{"n1": healthy}, editN1: requestedBy("", "maintenance"),
			want:       &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerManual, Methods: []v1alpha1.Method{ipmiMethod}},
			wantReason: "maintenance", wantEvents: created("n1"),
		},
		{
			name: "an invalid manual request is refused", policy: poolPolicy(ipmiMethod),
			nodes: map[string]string{"n1": healthy}, editN1: requestedBy("kubectl-annotate", "  "),
			wantEvents: []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonInvalidFenceRequest}},
		},
		{
			name:  "a manual request without a policy is refused",
			nodes: map[string]string{"n1": healthy}, editN1: requestedBy("kubectl-annotate", "disk controller on fire"),
			wantEvents: []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonNoPolicy}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, hbs := cluster(tt.nodes)
			for _, o := range objs {
				if n, ok := o.(*corev1.Node); ok && n.Name == "n1" && tt.editN1 != nil {
					tt.editN1(n)
				}
			}
			if tt.policy != nil {
				objs = append(objs, tt.policy)
			}
			if tt.existing != nil {
				objs = append(objs, tt.existing.DeepCopy())
			}
			c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).WithReturnManagedFields()).Build()
			rec := &recorder{}
			r := &NodeReconciler{Client: c, Recorder: rec, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			checkFence(t, c, tt.want, tt.wantReason)
			if diff := cmp.Diff(tt.wantEvents, rec.recorded()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// withPodIndex indexes pods by spec.nodeName, as the API server's field selector does.
func withPodIndex(b *fakeclient.ClientBuilder) *fakeclient.ClientBuilder {
	return b.WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} })
}

// checkFence checks n1's NodeFence, and that it is the only one.
func checkFence(t *testing.T, c client.Client, want *v1alpha1.NodeFenceSpec, wantReason string) {
	t.Helper()
	var list v1alpha1.NodeFenceList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, nf := range list.Items {
		names = append(names, nf.Name)
	}
	sort.Strings(names)
	nf := &v1alpha1.NodeFence{}
	err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf)
	switch {
	case want == nil && apierrors.IsNotFound(err):
		if len(names) != 0 {
			t.Errorf("NodeFences %v, want none", names)
		}
		return
	case want == nil:
		t.Fatalf("NodeFence n1 = %+v (err %v), want none", nf.Spec, err)
	case err != nil:
		t.Fatalf("no NodeFence n1: %v", err)
	}
	if diff := cmp.Diff([]string{"n1"}, names); diff != "" {
		t.Errorf("NodeFences (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(*want, nf.Spec, cmpopts.IgnoreFields(v1alpha1.NodeFenceSpec{}, "Reason")); diff != "" {
		t.Errorf("NodeFence spec (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(nf.Spec.Reason, wantReason) {
		t.Errorf("NodeFence reason %q, want it to begin with %q", nf.Spec.Reason, wantReason)
	}
	if got := nf.Labels[v1alpha1.LabelNode]; got != "n1" {
		t.Errorf("label %s = %q, want n1", v1alpha1.LabelNode, got)
	}
}

// A deleted node's agent heartbeats are forgotten: its agent is not missing, it is gone.
func TestDeletedNodeForgetsItsAgent(t *testing.T) {
	hbs := heartbeats{"gone": {Node: "gone", Interval: time.Second, Received: t0.Add(-time.Hour)}, "n1": {Node: "n1", Interval: time.Second, Received: t0}}
	c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).Build()
	r := &NodeReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "gone"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := hbs["gone"]; ok {
		t.Error("the deleted node's heartbeats are still kept")
	}
	if _, ok := hbs["n1"]; !ok {
		t.Error("another node's heartbeats were dropped")
	}
}

// A storm's nodes fall Dead one by one, each a renewal interval after its own last renewal
// (classify's Dead before the Lease expires), so when the first is judged Dead the others'
// Leases may still read fresh. The storm guard counts them as late by their agents' silence,
// with no Lease renewal seen since: n1 and n2 lose power together, n1's last renewal 11 s
// before and n2's 4 s before; n3 reports both unreachable. n1 must not be fenced while n2 goes
// the same way: 2 of 3 unhealthy, over the guard's 1. A node whose Lease was renewed after its
// agent went silent (its agent alone died) is not counted, and n1 is fenced.
func TestStormGuardCountsAStormBeforeItsFirstDead(t *testing.T) {
	silentAt := t0.Add(-3050 * time.Millisecond) // both agents' last heartbeat; lost after 3 s
	for _, tt := range []struct {
		name      string
		n2Renewed time.Time // when n2's latest renewal was made and seen
		want      *v1alpha1.NodeFenceSpec
		events    []eventSeen
	}{
		{"n2 silent since with n1", t0.Add(-4 * time.Second), nil,
			[]eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonStormGuard}}},
		{"n2's kubelet renewed after its agent went silent", t0.Add(-500 * time.Millisecond),
			&v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead", Methods: []v1alpha1.Method{ipmiMethod}},
			created("n1")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			renewed := map[string]time.Time{"n1": t0.Add(-11050 * time.Millisecond), "n2": tt.n2Renewed, "n3": t0.Add(-time.Second)}
			renewals := lease.NewRenewals()
			objs := []client.Object{poolPolicy(ipmiMethod)}
			for name, at := range renewed {
				objs = append(objs, nodeRenewed(renewals, name, at)...)
			}
			hbs := heartbeats{
				"n1": {Node: "n1", Interval: time.Second, Received: silentAt, KubeletHealthy: true},
				"n2": {Node: "n2", Interval: time.Second, Received: silentAt, KubeletHealthy: true},
				"n3": {Node: "n3", Interval: time.Second, Received: t0.Add(-200 * time.Millisecond), KubeletHealthy: true,
					Peers: []agentwire.PeerReport{{Node: "n1", At: t0.Add(-time.Second)}, {Node: "n2", At: t0.Add(-time.Second)}}},
			}
			detectN1(t, objs, hbs, renewals, tt.want, "Dead: dead: agent heartbeat lost", tt.events)
		})
	}
}

// nodeRenewed is Node name, of pool a, and its Lease renewed at renewed, a renewal renewals saw
// then, replacing one it saw a renewal interval before.
func nodeRenewed(renewals *lease.Renewals, name string, renewed time.Time) []client.Object {
	renew := metav1.NewMicroTime(renewed)
	before := renewed.Add(-10 * time.Second) // the kubelet's default renewal interval
	renewals.Seen(name, before, before)
	renewals.Seen(name, renewed, renewed)
	return []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "a"}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: name}, Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}}
}

// detectN1 reconciles node n1 at t0 among objs, with the agents' heartbeats hbs and the
// renewals seen, and checks n1's NodeFence (want, nil for none, its Reason beginning with
// reason) and the events recorded.
func detectN1(t *testing.T, objs []client.Object, hbs heartbeats, renewals *lease.Renewals, want *v1alpha1.NodeFenceSpec, reason string, events []eventSeen) {
	t.Helper()
	detectN1By(t, objs, observe.Observer{Heartbeats: hbs, Renewals: renewals}, want, reason, events)
}

// askedSlower is the heartbeat interval the controller asks of each node: 10 s of those whose
// state in others is slower, 1 s of the rest.
func askedSlower(others map[string]string, slower string) func(node string) time.Duration {
	return func(node string) time.Duration {
		if others[node] == slower {
			return 10 * time.Second
		}
		return time.Second
	}
}

// detectN1By is detectN1 with the observer o (its Reader set to the world's client).
func detectN1By(t *testing.T, objs []client.Object, o observe.Observer, want *v1alpha1.NodeFenceSpec, reason string, events []eventSeen) {
	t.Helper()
	detectN1With(t, objs, o, nil, want, reason, events)
}

// detectN1With is detectN1By with the reconciler edited by edit (nil: none) before the look; it
// returns the events' messages.
func detectN1With(t *testing.T, objs []client.Object, o observe.Observer, edit func(*NodeReconciler), want *v1alpha1.NodeFenceSpec, reason string, events []eventSeen) []string {
	t.Helper()
	c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).WithReturnManagedFields()).Build()
	rec := &recorder{}
	o.Reader = c
	r := &NodeReconciler{Client: c, Recorder: rec, Observer: o, Now: func() time.Time { return t0 }}
	if edit != nil {
		edit(r)
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	checkFence(t, c, want, reason)
	if diff := cmp.Diff(events, rec.recorded()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	return rec.messages
}

// A node found Dead while the agents of other, live nodes are silent to the controller (their
// kubelets renew after their agents' silence) is not fenced: the controller's heartbeat channel
// is the likelier cut, and the node, whose kubelet alone died, may be alive to its agent and
// peers (invariants 3 and 4). Those nodes read Healthy, so the storm guard does not hold. One
// such agent is no sign, nor are machines silent on every path (off): the Dead node is fenced.
func TestAgentsOfLiveNodesSilentHoldTheFence(t *testing.T) {
	silentAt := t0.Add(-5 * time.Second) // lost after 3 s
	fenced := &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead", Methods: []v1alpha1.Method{ipmiMethod}}
	held := []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonAgentsSilent}}
	for _, tt := range []struct {
		name   string
		others map[string]string // n2..n4: "fresh" (heard), "silent" (agent silent, kubelet renewing), "off" (silent on every path), "justoff" (silent since n1's silence), "slow" (a 10 s interval, heard last before n1's silence), "firstmet" (silent, its renewal only first met), "asked" (silent by its own 1 s, asked 10 s)
		want   *v1alpha1.NodeFenceSpec
		events []eventSeen
	}{
		{"every other agent silent", map[string]string{"n2": "silent", "n3": "silent", "n4": "silent"}, nil, held},
		{"two of three silent", map[string]string{"n2": "silent", "n3": "silent", "n4": "fresh"}, nil, held},
		{"one of three silent", map[string]string{"n2": "silent", "n3": "fresh", "n4": "fresh"}, fenced, created("n1")},
		{"one silent, the others off", map[string]string{"n2": "silent", "n3": "off", "n4": "off"}, fenced, created("n1")},
		{"two machines off, one heard", map[string]string{"n2": "off", "n3": "off", "n4": "fresh"}, fenced, created("n1")},
		// Silent since n1's silence, their kubelets' next renewal not due yet: off, or alive
		// and silent to the controller alone; they weigh as silent until it is due.
		{"two machines silent, their next renewal not due yet", map[string]string{"n2": "justoff", "n3": "justoff", "n4": "fresh"}, nil, held},
		// Heartbeating every 10 s, last heard before n1 fell silent: not late yet by their own
		// interval, but they may have fallen silent with it.
		{"two slower agents not heard since n1's silence", map[string]string{"n2": "slow", "n3": "slow", "n4": "fresh"}, nil, held},
		// Their Leases' renewal first met on record after their agents' silence: it was made
		// some time before, and says nothing of whether their kubelets still renew.
		{"two silent agents, their renewal only first met", map[string]string{"n2": "firstmet", "n3": "firstmet", "n4": "fresh"}, fenced, created("n1")},
		// Asked for a 10 s interval, they report 1 s still: judged by the longer, not late yet.
		{"two agents asked a longer interval", map[string]string{"n2": "asked", "n3": "asked", "n4": "fresh"}, fenced, created("n1")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			renewals := lease.NewRenewals()
			// The storm guard lets every node through: machines off are its case, not this hold's.
			objs := []client.Object{withGuard(poolPolicy(ipmiMethod), "100%")}
			hbs := heartbeats{"n1": {Node: "n1", Interval: time.Second, Received: silentAt, KubeletHealthy: true}}
			add := func(name string, renewed time.Time) { objs = append(objs, nodeRenewed(renewals, name, renewed)...) }
			add("n1", t0.Add(-25*time.Second))
			for name, state := range tt.others {
				switch state {
				case "fresh":
					add(name, t0.Add(-time.Second))
					hbs[name] = agentwire.Heartbeat{Node: name, Interval: time.Second, Received: t0.Add(-200 * time.Millisecond), KubeletHealthy: true}
				case "silent":
					add(name, t0.Add(-time.Second))
					hbs[name] = agentwire.Heartbeat{Node: name, Interval: time.Second, Received: silentAt, KubeletHealthy: true}
				case "off": // for longer than a renewal interval
					offAt := t0.Add(-20 * time.Second)
					add(name, offAt.Add(-time.Second))
					hbs[name] = agentwire.Heartbeat{Node: name, Interval: time.Second, Received: offAt, KubeletHealthy: true}
				case "justoff":
					add(name, silentAt.Add(-time.Second))
					hbs[name] = agentwire.Heartbeat{Node: name, Interval: time.Second, Received: silentAt, KubeletHealthy: true}
				case "slow":
					add(name, t0.Add(-time.Second))
					hbs[name] = agentwire.Heartbeat{Node: name, Interval: 10 * time.Second, Received: silentAt.Add(-2 * time.Second), KubeletHealthy: true}
				case "firstmet":
					offAt := t0.Add(-20 * time.Second)
					o := nodeRenewed(lease.NewRenewals(), name, t0.Add(-time.Second))
					renewals.Seen(name, t0.Add(-time.Second), t0.Add(-time.Second)) // the only renewal on record
					objs = append(objs, o...)
					hbs[name] = agentwire.Heartbeat{Node: name, Interval: time.Second, Received: offAt, KubeletHealthy: true}
				case "asked":
					add(name, t0.Add(-time.Second))
					hbs[name] = agentwire.Heartbeat{Node: name, Interval: time.Second, Received: silentAt, KubeletHealthy: true}
				}
			}
			detectN1By(t, objs, observe.Observer{Heartbeats: hbs, Renewals: renewals, IntervalFor: askedSlower(tt.others, "asked")}, tt.want, "Dead: ", tt.events)
		})
	}
}

// A node name may be 253 characters, a label value only 63: the fence of a node with a longer
// name goes without the palisade.dev/node label, which the API server would refuse, and with it
// the fence.
func TestLongNodeNameFenceIsValid(t *testing.T) {
	for _, name := range []string{"n1", strings.Repeat("worker-", 10) + "1.example.internal"} {
		nf := newNodeFence(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, poolPolicy(ipmiMethod), v1alpha1.TriggerManual, "test")
		if errs := metav1validation.ValidateLabels(nf.Labels, field.NewPath("metadata", "labels")); len(errs) > 0 {
			t.Errorf("node %q (%d characters): the API server would refuse its fence: %v", name, len(name), errs.ToAggregate())
		}
		if _, labelled := nf.Labels[v1alpha1.LabelNode]; labelled != (len(name) <= 63) {
			t.Errorf("node %q (%d characters): label %s present %v", name, len(name), v1alpha1.LabelNode, labelled)
		}
	}
}

// A node cut off from the controller and its peers whose kubelet still renews, as late as
// every node's renewals come on a loaded API server, is not fenced: its renewal counts as
// missed only twice as late as renewals have come lately. On a cluster whose renewals come on
// time, the same silence is a Dead node, fenced.
func TestFastDeadFollowsRenewalLateness(t *testing.T) {
	silentAt := t0.Add(-5 * time.Second) // n1's agent's last heartbeat; lost after 3 s
	for _, tt := range []struct {
		name string
		gap  time.Duration // how far apart the other nodes' renewals were seen
		want *v1alpha1.NodeFenceSpec
	}{
		{"renewals 3s late on every node: n1's, 3.05s late, not missed", 13 * time.Second, nil},
		{"renewals on time: n1's missed", 10300 * time.Millisecond,
			&v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead", Methods: []v1alpha1.Method{ipmiMethod}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			renewals := lease.NewRenewals()
			o := observe.Observer{Renewals: renewals}
			objs := []client.Object{withGuard(poolPolicy(ipmiMethod), "100%")}
			hbs := heartbeats{"n1": {Node: "n1", Interval: time.Second, Received: silentAt, KubeletHealthy: true}}
			// renew has the watch deliver node's renewals, gap apart, the last at last.
			renew := func(name string, gap time.Duration, last time.Time) {
				var l *coordinationv1.Lease
				for i := 4; i >= 0; i-- {
					at := last.Add(-time.Duration(i) * gap)
					objs := nodeRenewed(nil, name, at)
					l = objs[1].(*coordinationv1.Lease)
					l.Spec.LeaseDurationSeconds = ptr.To[int32](40)
					o.SawLease(l, at)
				}
				objs = append(objs, nodeRenewed(nil, name, last)[0], l)
			}
			renew("n1", 10300*time.Millisecond, t0.Add(-13050*time.Millisecond))
			for _, name := range []string{"n2", "n3", "n4"} {
				renew(name, tt.gap, t0.Add(-time.Second))
				hbs[name] = agentwire.Heartbeat{Node: name, Interval: time.Second, Received: t0.Add(-200 * time.Millisecond), KubeletHealthy: true,
					Peers: []agentwire.PeerReport{{Node: "n1", At: t0.Add(-time.Second)}}}
			}
			var events []eventSeen
			if tt.want != nil {
				events = created("n1")
			}
			detectN1(t, objs, hbs, renewals, tt.want, "Dead: dead: agent heartbeat lost", events)
		})
	}
}

// A controller that took over leadership (or restarted) while the heartbeat channel is cut has
// heard no agent; the nodes marked as running one (v1alpha1.AnnotationAgent) count all the same:
// once it has listened three heartbeat intervals, a marked node whose kubelet renewed since is
// a live node whose agent is silent to it, and a Dead node is not fenced while most such are. A
// marked machine silent on every path, and nodes not marked (no agent known), are no such sign.
func TestAgentsSilentHoldAfterATakeover(t *testing.T) {
	listening := t0.Add(-20 * time.Second) // the new leader began to listen; 3 s of warm-up
	fenced := &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead", Methods: []v1alpha1.Method{ipmiMethod}}
	held := []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonAgentsSilent}}
	for _, tt := range []struct {
		name   string
		others map[string]string // n2..n4: "marked" (renewing), "off" (marked, no renewal since the warm-up), "unmarked" (renewing), "slow" (marked, renewing, asked a 10 s heartbeat interval)
		want   *v1alpha1.NodeFenceSpec
		events []eventSeen
	}{
		{"every other node marked and renewing", map[string]string{"n2": "marked", "n3": "marked", "n4": "marked"}, nil, held},
		{"two marked and renewing, one not marked", map[string]string{"n2": "marked", "n3": "marked", "n4": "unmarked"}, nil, held},
		{"one marked and renewing, two marked and off", map[string]string{"n2": "marked", "n3": "off", "n4": "off"}, fenced, created("n1")},
		{"no node marked: no agent known", map[string]string{"n2": "unmarked", "n3": "unmarked", "n4": "unmarked"}, fenced, created("n1")},
		// Their agents asked for a 10 s interval: the controller has listened less than three
		// of it, they may yet be heard, and weigh as silent until then.
		{"marked, not heard yet, may still be", map[string]string{"n2": "slow", "n3": "slow", "n4": "slow"}, nil, held},
	} {
		t.Run(tt.name, func(t *testing.T) {
			renewals := lease.NewRenewals()
			objs := []client.Object{withGuard(poolPolicy(ipmiMethod), "100%")}
			add := func(name string, renewed time.Time, marked bool) {
				o := nodeRenewed(renewals, name, renewed)
				if marked {
					o[0].SetAnnotations(map[string]string{v1alpha1.AnnotationAgent: listening.Add(-time.Hour).Format(time.RFC3339)})
				}
				objs = append(objs, o...)
			}
			add("n1", t0.Add(-25*time.Second), true)
			for name, state := range tt.others {
				switch state {
				case "marked":
					add(name, t0.Add(-time.Second), true)
				case "off":
					add(name, listening.Add(time.Second), true)
				case "unmarked":
					add(name, t0.Add(-time.Second), false)
				case "slow":
					add(name, t0.Add(-time.Second), true)
				}
			}
			detectN1By(t, objs, observe.Observer{Heartbeats: heartbeats{}, Renewals: renewals, Since: listening, IntervalFor: askedSlower(tt.others, "slow")}, tt.want, "Dead: ", tt.events)
		})
	}
}

// With the agents' ServiceAccount known, the AgentsSilent hold judges the heartbeat channel only
// by the nodes a pod of it is bound to: a node the agent DaemonSet no longer covers (narrowed,
// the agent uninstalled there) is silent for good, heard once or marked, and is no sign of a cut
// channel. A pod in any phase counts (crash-looping, being replaced), pods of another account
// do not, and when the pods cannot be listed every node heard or marked counts.
func TestAgentsSilentJudgesOnlyNodesWithAnAgentPod(t *testing.T) {
	listening := t0.Add(-20 * time.Second) // a takeover: 3 s of warm-up
	silentAt := t0.Add(-5 * time.Second)
	sa := types.NamespacedName{Namespace: "palisade-system", Name: "palisade-agent"}
	fenced := &v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead", Methods: []v1alpha1.Method{ipmiMethod}}
	held := []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonAgentsSilent}}
	pod := func(node, account string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: account + "-" + node},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: account}, Status: corev1.PodStatus{Phase: phase}}
	}
	unbound := func(node string) *corev1.Pod { return agentPodFor(sa, node) }
	for _, tt := range []struct {
		name     string
		heard    bool // n2..n4's agents heard, now silent; else a takeover, n2..n4 marked
		pods     []client.Object
		listFail bool
		want     *v1alpha1.NodeFenceSpec
		events   []eventSeen
		says     string // in the Event's note, when held
	}{
		{"heard, an agent pod on each", true, []client.Object{pod("n2", sa.Name, corev1.PodRunning), pod("n3", sa.Name, corev1.PodRunning), pod("n4", sa.Name, corev1.PodRunning)}, false, nil, held, ""},
		{"heard, the DaemonSet narrowed off n2 and n3", true, []client.Object{pod("n4", sa.Name, corev1.PodRunning)}, false, fenced, created("n1"), ""},
		{"marked, an agent pod on each, two pending or failing", false, []client.Object{pod("n2", sa.Name, corev1.PodPending), pod("n3", sa.Name, corev1.PodFailed), pod("n4", sa.Name, corev1.PodRunning)}, false, nil, held, "with an agent pod, not heard"},
		{"marked, the DaemonSet narrowed off n2 and n3", false, []client.Object{pod("n4", sa.Name, corev1.PodRunning)}, false, fenced, created("n1"), ""},
		{"marked, only another account's pods on n2 and n3", false, []client.Object{pod("n2", "other", corev1.PodRunning), pod("n3", "other", corev1.PodRunning), pod("n4", sa.Name, corev1.PodRunning)}, false, fenced, created("n1"), ""},
		{"marked, the pods cannot be listed", false, nil, true, nil, held, "if one no longer runs an agent, remove its annotation"},
		// A rollout: the new pods of n2 and n3 created, not bound yet.
		{"marked, n2's and n3's pods not bound yet", false, []client.Object{unbound("n2"), unbound("n3"), pod("n4", sa.Name, corev1.PodRunning)}, false, nil, held, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			renewals := lease.NewRenewals()
			objs := append([]client.Object{withGuard(poolPolicy(ipmiMethod), "100%")}, tt.pods...)
			o := observe.Observer{Heartbeats: heartbeats{}, Renewals: renewals, Since: listening}
			hbs := o.Heartbeats.(heartbeats)
			for _, name := range []string{"n1", "n2", "n3", "n4"} {
				renewed := t0.Add(-time.Second)
				if name == "n1" {
					renewed = t0.Add(-25 * time.Second)
				}
				no := nodeRenewed(renewals, name, renewed)
				if tt.heard {
					hbs[name] = agentwire.Heartbeat{Node: name, Interval: time.Second, Received: silentAt, KubeletHealthy: true}
				} else {
					no[0].SetAnnotations(map[string]string{v1alpha1.AnnotationAgent: listening.Add(-time.Hour).Format(time.RFC3339)})
				}
				objs = append(objs, no...)
			}
			if tt.heard {
				o.Since = time.Time{}
			}
			notes := detectN1With(t, objs, o, func(r *NodeReconciler) {
				r.AgentServiceAccount = sa
				if tt.listFail {
					r.APIReader = interceptor.NewClient(r.Client.(client.WithWatch), interceptor.Funcs{
						List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
							if _, pods := list.(*corev1.PodList); pods {
								return errors.New("the API server is overloaded")
							}
							return c.List(ctx, list, opts...)
						}})
				}
			}, tt.want, "Dead: ", tt.events)
			if tt.says != "" && (len(notes) != 1 || !strings.Contains(notes[0], tt.says)) {
				t.Errorf("the Event's note %q does not say %q", notes, tt.says)
			}
		})
	}
}

// agentPodFor is a pod of the agents' ServiceAccount sa created for node by its DaemonSet and
// not bound yet: pinned to the node by a required node affinity on metadata.name.
func agentPodFor(sa types.NamespacedName, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: "agent-" + node},
		Spec: corev1.PodSpec{ServiceAccountName: sa.Name, Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
		}}}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
}

// The agents' pods are listed at most every markedFor, a failed list too (its error returned
// until the next); a node counts as running an agent until podGone after the last list that
// found its pod, so that a rollout's gap (the old pod deleted, the new one not created yet)
// does not take it out of the AgentsSilent hold.
func TestAgentPodNodesRemembersWhereThePodsWere(t *testing.T) {
	sa := types.NamespacedName{Namespace: "palisade-system", Name: "palisade-agent"}
	now := t0
	lists, fail := 0, false
	elsewhere := agentPodFor(types.NamespacedName{Namespace: "elsewhere", Name: sa.Name}, "n1") // same account name, another namespace
	api := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(agentPodFor(sa, "n2"), agentPodFor(sa, "n3"), elsewhere)).Build()
	r := &NodeReconciler{Client: api, AgentServiceAccount: sa, Now: func() time.Time { return now },
		APIReader: interceptor.NewClient(api, interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				lists++
				if fail {
					return errors.New("the API server is overloaded")
				}
				return c.List(ctx, list, opts...)
			}})}
	check := func(when string, wantLists int, wantErr bool, runs ...string) {
		t.Helper()
		runsAgent, err := r.agentPodNodes(context.Background())
		if lists != wantLists || (err != nil) != wantErr {
			t.Fatalf("%s: %d lists, error %v; want %d, an error %v", when, lists, err, wantLists, wantErr)
		}
		if err != nil {
			return
		}
		var got []string
		for _, n := range []string{"n1", "n2", "n3"} {
			if runsAgent(n) {
				got = append(got, n)
			}
		}
		if !slices.Equal(got, runs) {
			t.Errorf("%s: nodes running an agent %v, want %v", when, got, runs)
		}
	}
	check("first", 1, false, "n2", "n3")
	if err := api.Delete(context.Background(), agentPodFor(sa, "n3")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(markedFor - time.Millisecond)
	check("within markedFor: not listed again", 1, false, "n2", "n3")
	now = now.Add(time.Millisecond)
	check("n3's pod deleted: counts until podGone", 2, false, "n2", "n3")
	fail = true
	now = now.Add(markedFor)
	check("a failed list", 3, true)
	now = now.Add(time.Second)
	check("its error kept for markedFor", 3, true)
	fail = false
	now = t0.Add(podGone - time.Millisecond)
	check("just before podGone after the last list that found n3's: the failed list wiped nothing", 4, false, "n2", "n3")
	now = t0.Add(podGone + markedFor)
	check("podGone after it", 5, false, "n2")
}

// The controller marks a node as running an agent once it hears the agent, and only then; a
// mark already there stays as written.
func TestAgentHeardMarksItsNode(t *testing.T) {
	earlier := t0.Add(-time.Hour).Format(time.RFC3339)
	for _, tt := range []struct {
		name  string
		heard bool
		was   string // the node's mark before; "": none
		want  string
	}{
		{"heard: marked", true, "", t0.Format(time.RFC3339)},
		{"not heard: not marked", false, "", ""},
		{"heard, marked before: kept", true, earlier, earlier},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "a"}}}
			if tt.was != "" {
				node.Annotations = map[string]string{v1alpha1.AnnotationAgent: tt.was}
			}
			hbs := heartbeats{}
			if tt.heard {
				hbs["n1"] = agentwire.Heartbeat{Node: "n1", Interval: time.Second, Received: t0, KubeletHealthy: true}
			}
			c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(node, poolPolicy(ipmiMethod))).Build()
			r := &NodeReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			got := &corev1.Node{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, got); err != nil {
				t.Fatal(err)
			}
			if mark := got.Annotations[v1alpha1.AnnotationAgent]; mark != tt.want {
				t.Errorf("annotation %s = %q, want %q", v1alpha1.AnnotationAgent, mark, tt.want)
			}
		})
	}
}
