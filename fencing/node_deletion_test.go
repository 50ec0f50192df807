package fencing

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/providers"
)

// fenceIn is n1's NodeFence with the given phase and steps.
func fenceIn(phase v1alpha1.Phase, steps ...v1alpha1.Step) *v1alpha1.NodeFence {
	nf := fenceWith([]string{"ipmi"}, v1alpha1.Release{}, steps...)
	nf.Name, nf.Spec.PolicyName, nf.Spec.Trigger, nf.Status.Phase = "n1", "pool", v1alpha1.TriggerNodeDeleted, phase
	return nf
}

// TestNodeDeletionIsAFenceRequest reconciles node n1 once and checks its finalizer, the fence
// its deletion leads to, and the events.
func TestNodeDeletionIsAFenceRequest(t *testing.T) {
	ok := v1alpha1.StepSucceeded
	deleting := func(n *corev1.Node) {
		now := metav1.NewTime(t0)
		n.DeletionTimestamp = &now
		n.Finalizers = []string{"example.com/other", v1alpha1.FinalizerFenceOnDelete}
	}
	held := func(n *corev1.Node) { n.Finalizers = []string{v1alpha1.FinalizerFenceOnDelete} }
	deletingTainted := func(n *corev1.Node) {
		deleting(n)
		n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	}
	dryRunRecord := fenceIn(v1alpha1.PhasePending)
	dryRunRecord.Spec.DryRun, dryRunRecord.Spec.Trigger = true, v1alpha1.TriggerDetected
	released := func() *v1alpha1.NodeFence {
		return fenceIn(v1alpha1.PhaseReleased, st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok), st(v1alpha1.StepTaint, "", ok))
	}
	// deletingPosted: n1 being deleted, its kubelet's last status posted at posted.
	deletingPosted := func(posted time.Time) func(*corev1.Node) {
		return func(n *corev1.Node) {
			deleting(n)
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(posted)}}
		}
	}
	// releasedUntainted: a fence released 10 minutes ago with no taint (outOfServiceTaint off).
	releasedUntainted := func(edit func(*v1alpha1.NodeFence)) *v1alpha1.NodeFence {
		nf := fenceIn(v1alpha1.PhaseReleased, st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok), st(v1alpha1.StepDeletePods, "", ok))
		nf.Status.FencedTime = ptr.To(metav1.NewTime(t0.Add(-10 * time.Minute)))
		if edit != nil {
			edit(nf)
		}
		return nf
	}
	heldThenCreated := func() []eventSeen {
		return append([]eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonDeletionHeld}}, created("n1")...)
	}
	tests := []struct {
		name           string
		policy         *v1alpha1.FencingPolicy
		state          string
		editN1         func(*corev1.Node)
		apiN1          func(*corev1.Node) // what the API server adds to n1 (the cache strips managedFields)
		existing       *v1alpha1.NodeFence
		wantFinalizer  bool
		wantTrigger    v1alpha1.Trigger // of n1's NodeFence afterwards; "" for none
		wantMethods    int
		wantEventsTail []eventSeen
	}{
		{name: "a node a policy covers gets the finalizer", policy: poolPolicy(ipmiMethod), state: healthy, wantFinalizer: true},
		{name: "a node no policy covers loses it", state: healthy, editN1: held},
		{name: "a dry-run policy holds no deletion", policy: dryRun(poolPolicy(ipmiMethod)), state: healthy, editN1: held},
		{name: "a deleted node is fenced with the whole chain, the finalizer holds", policy: poolPolicy(executorMethod, ipmiMethod), state: healthy,
			editN1: deleting, wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 2, wantEventsTail: created("n1")},
		{name: "a deleted node whose fence is under way stays held", policy: poolPolicy(ipmiMethod), state: dead, editN1: deleting,
			existing:      fenceIn(v1alpha1.PhaseFenced, st(v1alpha1.StepPowerOff, "ipmi", ok), st(v1alpha1.StepConfirmOff, "ipmi", ok)),
			wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1},
		{name: "a deleted node whose fence is confirmed and verified goes", policy: poolPolicy(ipmiMethod), state: dead, editN1: deleting,
			existing:    fenceIn(v1alpha1.PhaseReleasing, st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok)),
			wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1,
			wantEventsTail: []eventSeen{{"Node/n1", corev1.EventTypeNormal, ReasonDeletionReleased}}},
		{name: "a deleted node whose fence failed stays held and says what to do", policy: poolPolicy(ipmiMethod), state: dead, editN1: deleting,
			existing:      fenceIn(v1alpha1.PhaseFailed, st(v1alpha1.StepPowerOff, "ipmi", v1alpha1.StepFailed)),
			wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1,
			wantEventsTail: []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonDeletionHeld}}},
		{name: "a deleted node whose fence was disproved stays held", policy: poolPolicy(ipmiMethod), state: dead, editN1: deleting,
			existing:      fenceIn(v1alpha1.PhaseFencing, st(v1alpha1.StepConfirmOff, "ipmi", ok), alive(v1alpha1.StepVerifyFenced, "ipmi")),
			wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1},
		{name: "a deleted node no policy covers any more goes", state: dead, editN1: deleting,
			wantEventsTail: []eventSeen{{"Node/n1", corev1.EventTypeNormal, ReasonDeletionReleased}}},
		{name: "a deleted node under a dry run goes", policy: dryRun(poolPolicy(ipmiMethod)), state: dead, editN1: deleting,
			wantEventsTail: []eventSeen{{"Node/n1", corev1.EventTypeNormal, ReasonDeletionReleased}}},
		// A dry run's record left from before the policy fenced for real (the node recovered,
		// the record stayed) holds no deletion and covers none either: the node is fenced.
		{name: "a deleted node with a dry run's record is fenced once its policy fences for real", policy: poolPolicy(ipmiMethod), state: healthy,
			editN1: deleting, existing: dryRunRecord,
			wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1, wantEventsTail: created("n1")},
		{name: "a deleted node with a dry run's record under a dry run goes", policy: dryRun(poolPolicy(ipmiMethod)), state: healthy,
			editN1: deleting, existing: dryRunRecord, wantTrigger: v1alpha1.TriggerDetected, wantMethods: 1,
			wantEventsTail: []eventSeen{{"Node/n1", corev1.EventTypeNormal, ReasonDeletionReleased}}},
		{name: "a deleted node whose released fence's taint is on goes", policy: poolPolicy(ipmiMethod), state: dead, editN1: deletingTainted,
			existing: released(), wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1,
			wantEventsTail: []eventSeen{{"Node/n1", corev1.EventTypeNormal, ReasonDeletionReleased}}},
		// The taint taken off by hand (the node back in service), or a new Node registered under
		// the name: the released fence no longer covers what runs there.
		{name: "a deleted node whose released fence's taint was taken off is fenced anew", policy: poolPolicy(ipmiMethod), state: healthy, editN1: deleting,
			existing: released(), wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1, wantEventsTail: created("n1")},
		// A released fence whose confirmation no longer covers the Node (no taint to tell: the
		// policy's outOfServiceTaint off): its kubelet posted after the fence, its power-off was
		// disproved, or another Node registered under the name. Letting the deletion go would
		// have PodGC force-delete pods that run: fenced anew, and said.
		{name: "a deleted node whose kubelet posted after its released fence is fenced anew", policy: poolPolicy(ipmiMethod), state: healthy,
			editN1: deletingPosted(t0.Add(-time.Second)), existing: releasedUntainted(nil),
			wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1, wantEventsTail: heldThenCreated()},
		{name: "a deleted node whose kubelet, its clock behind, wrote its status after its released fence is fenced anew", policy: poolPolicy(ipmiMethod), state: healthy,
			editN1: deletingPosted(t0.Add(-20 * time.Minute)),
			apiN1: func(n *corev1.Node) {
				wrote := metav1.NewTime(t0.Add(-time.Second)) // the API server's time of the kubelet's last status write
				n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &wrote}}
			},
			existing: releasedUntainted(nil), wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1, wantEventsTail: heldThenCreated()},
		{name: "a deleted node whose released fence's power-off was disproved is fenced anew", policy: poolPolicy(ipmiMethod), state: dead,
			editN1: deletingPosted(t0.Add(-20 * time.Minute)), existing: releasedUntainted(func(nf *v1alpha1.NodeFence) {
				nf.Status.PowerOffDisprovedTime = ptr.To(metav1.NewTime(t0.Add(-5 * time.Minute)))
			}),
			wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1, wantEventsTail: heldThenCreated()},
		{name: "a deleted node registered anew under a released fence's name is fenced anew", policy: poolPolicy(ipmiMethod), state: dead,
			editN1: deletingPosted(t0.Add(-20 * time.Minute)), existing: releasedUntainted(func(nf *v1alpha1.NodeFence) { nf.Status.NodeUID = "the-fenced-one" }),
			wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1, wantEventsTail: heldThenCreated()},
		{name: "a deleted node silent since its released fence goes", policy: poolPolicy(ipmiMethod), state: dead,
			editN1: deletingPosted(t0.Add(-20 * time.Minute)), existing: releasedUntainted(nil), wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1,
			wantEventsTail: []eventSeen{{"Node/n1", corev1.EventTypeNormal, ReasonDeletionReleased}}},
		// The policy deleted (or switched to a dry run, or no longer selecting the node) while a
		// fence is under way: the fence goes on, and so must the hold on the node's deletion.
		{name: "a node no policy covers keeps the finalizer while its fence is under way", state: dead, editN1: held,
			existing:      fenceIn(v1alpha1.PhaseFencing, st(v1alpha1.StepPowerOff, "ipmi", v1alpha1.StepStarted)),
			wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1},
		{name: "a node under a dry run keeps the finalizer while a fence is under way", policy: dryRun(poolPolicy(ipmiMethod)), state: dead, editN1: held,
			existing:      fenceIn(v1alpha1.PhaseFencing, st(v1alpha1.StepPowerOff, "ipmi", v1alpha1.StepStarted)),
			wantFinalizer: true, wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1},
		{name: "a node no policy covers loses the finalizer once its fence is recovered", state: healthy, editN1: held,
			existing: fenceIn(v1alpha1.PhaseRecovered), wantTrigger: v1alpha1.TriggerNodeDeleted, wantMethods: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, _ := cluster(map[string]string{"n1": tt.state})
			for _, o := range objs {
				if n, ok := o.(*corev1.Node); ok && tt.editN1 != nil {
					tt.editN1(n)
				}
			}
			if tt.policy != nil {
				objs = append(objs, tt.policy)
			}
			if tt.existing != nil {
				objs = append(objs, tt.existing)
			}
			c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
			rec := &recorder{}
			r := &NodeReconciler{Client: c, Recorder: rec, Observer: observe.Observer{Reader: c}, Now: func() time.Time { return t0 }}
			if tt.apiN1 != nil {
				r.APIReader = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
					Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
						err := c.Get(ctx, key, obj, opts...)
						if n, ok := obj.(*corev1.Node); ok && err == nil && key.Name == "n1" {
							tt.apiN1(n)
						}
						return err
					},
				})
			}
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			node := &corev1.Node{}
			err := c.Get(ctx, client.ObjectKey{Name: "n1"}, node)
			if client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
			has := false
			for _, f := range node.Finalizers {
				has = has || f == v1alpha1.FinalizerFenceOnDelete
			}
			if has != tt.wantFinalizer {
				t.Errorf("finalizer %s on n1 = %t, want %t (finalizers %v, gone %t)", v1alpha1.FinalizerFenceOnDelete, has, tt.wantFinalizer, node.Finalizers, apierrors.IsNotFound(err))
			}
			if tt.editN1 != nil && node.DeletionTimestamp != nil && !has && !slices.Contains(node.Finalizers, "example.com/other") {
				t.Errorf("another controller's finalizer went too: %v", node.Finalizers)
			}
			nf := &v1alpha1.NodeFence{}
			err = c.Get(ctx, client.ObjectKey{Name: "n1"}, nf)
			switch {
			case tt.wantTrigger == "" && !apierrors.IsNotFound(err):
				t.Errorf("NodeFence n1 = %+v (%v), want none", nf.Spec, err)
			case tt.wantTrigger != "" && err != nil:
				t.Errorf("no NodeFence n1: %v", err)
			case tt.wantTrigger != "" && (nf.Spec.Trigger != tt.wantTrigger || len(nf.Spec.Methods) != tt.wantMethods):
				t.Errorf("NodeFence n1: trigger %s, %d methods; want %s, %d", nf.Spec.Trigger, len(nf.Spec.Methods), tt.wantTrigger, tt.wantMethods)
			}
			if diff := cmp.Diff(tt.wantEventsTail, rec.recorded()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// A provider that reads the machine back as gone (a terminated instance) confirms the fence.
func TestMachineGoneConfirms(t *testing.T) {
	w := newWorld(t, "ipmi")
	w.power.SetStatus(&providers.Status{State: providers.Gone, Message: "instance i-0123 terminated"})
	nf := w.run(t)
	checkGolden(t, "machine-gone", goldenTrace(nf))
	checkReleased(t, w, true)
}

// The fence-on-delete finalizer is judged from the API server's record of the node's fence, not
// the cache: a cache behind it (a new leader's, or one that has not seen a fence made a moment
// ago) lets no deletion go that the record holds. Before, the finalizer went and PodGC
// force-deleted the pods of a node whose fence had not confirmed it off.
func TestNodeFinalizerJudgedOnTheRecordNotTheCache(t *testing.T) {
	ok := v1alpha1.StepSucceeded
	now := metav1.NewTime(t0)
	tests := []struct {
		name     string
		deleting bool // the Node is being deleted (else only held, no policy covering it)
		policy   *v1alpha1.FencingPolicy
		record   *v1alpha1.NodeFence
		// cached is what the cache shows of the fence: nil for nothing yet.
		cached *v1alpha1.NodeFence
	}{
		{"a deleted node whose fence the cache shows verified, the record disproved", true, poolPolicy(ipmiMethod),
			fenceIn(v1alpha1.PhaseFencing, st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok), alive(v1alpha1.StepTaint, "ipmi")),
			fenceIn(v1alpha1.PhaseReleasing, st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok))},
		{"a node no policy covers, with a fence under way the cache does not show yet", false, nil,
			fenceIn(v1alpha1.PhaseFencing, st(v1alpha1.StepPowerOff, "ipmi", v1alpha1.StepStarted)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, _ := cluster(map[string]string{"n1": dead})
			for _, o := range objs {
				if n, isNode := o.(*corev1.Node); isNode {
					n.Finalizers = []string{v1alpha1.FinalizerFenceOnDelete}
					if tt.deleting {
						n.DeletionTimestamp = &now
					}
				}
			}
			objs = append(objs, tt.record)
			if tt.policy != nil {
				objs = append(objs, tt.policy)
			}
			api := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
			cache := interceptor.NewClient(api.(client.WithWatch), interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if nf, isFence := obj.(*v1alpha1.NodeFence); isFence {
						if tt.cached == nil {
							return apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("nodefences").GroupResource(), key.Name)
						}
						tt.cached.DeepCopyInto(nf)
						return nil
					}
					return c.Get(ctx, key, obj, opts...)
				},
			})
			r := &NodeReconciler{Client: cache, APIReader: api, Recorder: &recorder{}, Observer: observe.Observer{Reader: api}, Now: func() time.Time { return t0 }}
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			node := &corev1.Node{}
			if err := api.Get(ctx, client.ObjectKey{Name: "n1"}, node); err != nil || !slices.Contains(node.Finalizers, v1alpha1.FinalizerFenceOnDelete) {
				t.Errorf("node n1 (%v): finalizers %v; want %s kept, as the fence's record holds it", err, node.Finalizers, v1alpha1.FinalizerFenceOnDelete)
			}
		})
	}
}
