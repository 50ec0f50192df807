package fencing

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// podsWaiting reads the node's pods from the API server and says which need its fence: under
// workloads, those of the kinds it names; with none, every pod the fence would delete (running,
// and not tolerating the out-of-service taint).
func podsWaiting(ctx context.Context, reader client.Reader, node string, w *v1alpha1.Workloads) (waiting, error) {
	var list corev1.PodList
	if err := reader.List(ctx, &list, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", node)}); err != nil {
		return waiting{}, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	var sel labels.Selector
	if w != nil && w.PodSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(w.PodSelector)
		if err != nil {
			return waiting{}, fmt.Errorf("workloads.podSelector: %w", err)
		}
		sel = s
	}
	var out waiting
	var need []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || tolerates(p.Spec.Tolerations) {
			continue
		}
		ok, err := podNeedsFence(ctx, reader, p, w, sel)
		if err != nil {
			return waiting{}, err
		}
		if ok {
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

// podNeedsFence says whether the pod is one the workloads name (any pod when there are none).
func podNeedsFence(ctx context.Context, reader client.Reader, p *corev1.Pod, w *v1alpha1.Workloads, sel labels.Selector) (bool, error) {
	if w == nil {
		return true, nil
	}
	if w.StatefulSets {
		if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "StatefulSet" && strings.HasPrefix(ref.APIVersion, appsv1.GroupName+"/") {
			return true, nil
		}
	}
	if sel != nil && sel.Matches(labels.Set(p.Labels)) {
		return true, nil
	}
	if w.RWOVolumes {
		return hasRWOVolume(ctx, reader, p)
	}
	return false, nil
}

// hasRWOVolume says whether one of the pod's claims (named, or a generic ephemeral volume's)
// may be attached by one node only.
func hasRWOVolume(ctx context.Context, reader client.Reader, p *corev1.Pod) (bool, error) {
	for _, v := range p.Spec.Volumes {
		switch {
		case v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil:
			if singleNode(v.Ephemeral.VolumeClaimTemplate.Spec.AccessModes) {
				return true, nil
			}
		case v.PersistentVolumeClaim != nil:
			pvc := &corev1.PersistentVolumeClaim{}
			err := reader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("reading claim %s/%s of pod %s: %w", p.Namespace, v.PersistentVolumeClaim.ClaimName, p.Name, err)
			}
			if singleNode(pvc.Spec.AccessModes) {
				return true, nil
			}
		}
	}
	return false, nil
}

// singleNode says whether the access modes let one node at most attach the volume.
func singleNode(modes []corev1.PersistentVolumeAccessMode) bool {
	if len(modes) == 0 {
		return false
	}
	for _, m := range modes {
		if m != corev1.ReadWriteOnce && m != corev1.ReadWriteOncePod {
			return false
		}
	}
	return true
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

// byUrgency enqueues a NodeFence with its urgency as its priority: when more fences are under
// way than the controller advances at once, the work queue hands out the most urgent first.
// A queue without priorities takes it as it comes.
func byUrgency() handler.TypedEventHandler[client.Object, reconcile.Request] {
	add := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}
		nf, isFence := o.(*v1alpha1.NodeFence)
		pq, isPriority := q.(priorityqueue.PriorityQueue[reconcile.Request])
		if !isFence || !isPriority {
			q.Add(req)
			return
		}
		prio := int(nf.Spec.Urgency)
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
