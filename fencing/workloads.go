package fencing

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// Workload-aware fencing (the 2016 Pod Safety proposal): a policy with workloads fences a failed
// node automatically only when one of its pods needs the fence — one on a volume only one node
// may attach, one a StatefulSet owns, one its selector names. And when more fences are under
// way than the controller advances at once, those whose pods belong to a PodDisruptionBudget
// already at its limit go first: their workload has no replica to spare.

const (
	// ReasonNoWorkloadToFence (event): a failed node holds no pod the policy fences for.
	ReasonNoWorkloadToFence = "NoWorkloadToFence"
	// maxWaitingListed bounds NodeFence.spec.waiting.
	maxWaitingListed = 10
)

// waiting is what a node's pods need of its fence.
type waiting struct {
	// pods waiting on the fence, namespace/name, sorted.
	pods []string
	// urgency counts those whose PodDisruptionBudget allows no disruption.
	urgency int32
}

// listed is the pods for NodeFence.spec.waiting: the first maxWaitingListed.
func (w waiting) listed() []string {
	return w.pods[:min(len(w.pods), maxWaitingListed)]
}

// podsWaiting reads the node's pods from the API server and says which need its fence, by the
// workloads' rule (v1alpha1.WorkloadRule): under workloads, those of the kinds it names; with
// none, every pod the fence would delete (running, and not tolerating the out-of-service taint).
func podsWaiting(ctx context.Context, reader client.Reader, node string, w *v1alpha1.Workloads) (waiting, error) {
	var list corev1.PodList
	if err := reader.List(ctx, &list, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", node)}); err != nil {
		return waiting{}, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	rule, err := v1alpha1.NewWorkloadRule(w)
	if err != nil {
		return waiting{}, err
	}
	claims := claimModes(ctx, reader)
	var out waiting
	var need []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		n, err := rule.NeedsFence(p, claims)
		if err != nil {
			return waiting{}, err
		}
		if n.Needed() {
			need = append(need, p)
			out.pods = append(out.pods, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(out.pods)
	urgency, err := atLimit(ctx, reader, need)
	if err != nil {
		return waiting{}, err
	}
	out.urgency = urgency
	return out, nil
}

// claimModes reads a claim's access modes from reader.
func claimModes(ctx context.Context, reader client.Reader) v1alpha1.ClaimModes {
	return func(namespace, name string) ([]corev1.PersistentVolumeAccessMode, error) {
		pvc := &corev1.PersistentVolumeClaim{}
		err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pvc)
		return pvc.Spec.AccessModes, err
	}
}

// atLimit counts the pods a PodDisruptionBudget with no disruption left selects.
func atLimit(ctx context.Context, reader client.Reader, pods []*corev1.Pod) (int32, error) {
	budgets := map[string][]policyv1.PodDisruptionBudget{} // by namespace
	var n int32
	for _, p := range pods {
		pdbs, ok := budgets[p.Namespace]
		if !ok {
			var list policyv1.PodDisruptionBudgetList
			if err := reader.List(ctx, &list, client.InNamespace(p.Namespace)); err != nil {
				return 0, fmt.Errorf("listing the PodDisruptionBudgets of namespace %s: %w", p.Namespace, err)
			}
			pdbs = list.Items
			budgets[p.Namespace] = pdbs
		}
		for _, b := range pdbs {
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			if b.Status.DisruptionsAllowed <= 0 {
				n++
				break
			}
		}
	}
	return n, nil
}

// passFirst lifts a fence whose verify window is open above every other in the work queue. A
// pass is a few reads of the informers' caches, due at a set moment (the window ends only at a
// pass); the release of another fence (a taint, force deletions, attachments) is many writes.
// Behind ten workers busy releasing a rack, a pass due in a second waited up to 8 s, and every
// window so lengthened delayed that fence's own release (bench-scale at 5000 nodes).
const passFirst = 1 << 24 // more pods than any node runs, so urgency still orders within a tier

// queuePriority is the fence's place in the work queue: its urgency, and above every other fence
// while its verify window is open.
func queuePriority(nf *v1alpha1.NodeFence) int {
	p := int(nf.Spec.Urgency)
	if len(nf.Status.Steps) > 0 {
		if s := lastStep(nf); s.Name == v1alpha1.StepVerifyFenced && s.State == v1alpha1.StepStarted {
			p += passFirst
		}
	}
	return p
}

// byPriority enqueues a NodeFence with its queuePriority: when more fences are under way than
// the controller advances at once, the work queue hands out the most urgent first. A queue
// without priorities takes it as it comes.
func byPriority() handler.TypedEventHandler[client.Object, reconcile.Request] {
	add := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}
		nf, isFence := o.(*v1alpha1.NodeFence)
		pq, isPriority := q.(priorityqueue.PriorityQueue[reconcile.Request])
		if !isFence || !isPriority {
			q.Add(req)
			return
		}
		prio := queuePriority(nf)
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: &prio}, req)
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
	}
}
