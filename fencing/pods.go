package fencing

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// deletePods marks the pods bound to the fenced node Failed and force-deletes them, listed from
// the API server by spec.nodeName. Pods that tolerate the out-of-service taint are left alone, as
// Kubernetes does. The step is done once every pod is marked and deleted with grace period 0:
// a pod whose object a finalizer keeps (another controller's business) no longer holds the node,
// and the attach-detach controller drops it from its desired state because it is terminal.
func (r *NodeFenceReconciler) deletePods(ctx context.Context, nf *v1alpha1.NodeFence) outcome {
	pods, err := r.podsToDelete(ctx, nf.Spec.NodeName)
	if err != nil {
		return pending(retryRelease, ReasonAPIError, "listing pods: %v", err)
	}
	deleted, err := r.forceDeleteAll(ctx, nf, pods)
	// Counted when this pass deleted the pod, so a retry does not count it again. A controller
	// killed before the record is saved loses this pass's count: the counter may fall short,
	// never count a pod twice.
	nf.Status.PodsDeleted += deleted
	if err != nil {
		return pending(retryRelease, ReasonAPIError, "%v", err)
	}
	left, err := r.podsToDelete(ctx, nf.Spec.NodeName)
	if err != nil {
		return pending(retryRelease, ReasonAPIError, "listing pods: %v", err)
	}
	var held, owed []corev1.Pod
	for _, p := range left {
		if podDone(&p) {
			held = append(held, p)
		} else {
			owed = append(owed, p)
		}
	}
	if len(owed) > 0 {
		return pending(retryRelease, ReasonPodsRemaining, "%s bound to the node not yet marked Failed and deleted with grace period 0: %s",
			countOf(len(owed), "pod"), podNames(owed))
	}
	msg := countOf(int(nf.Status.PodsDeleted), "pod") + " force-deleted"
	if len(held) > 0 {
		msg += fmt.Sprintf("; %s marked Failed and deleted, kept only by finalizers: %s", countOf(len(held), "pod"), heldBy(held))
	}
	return done("%s", msg)
}

// podNeeds says what the step still owes a pod: mark it terminal (Failed, with a DisruptionTarget
// condition, unless it has ended by itself) and delete it with grace period 0 (a pod already
// terminating with a longer grace period is deleted again: the API server shortens it).
func podNeeds(p *corev1.Pod) (mark, del bool) {
	mark = p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded
	del = p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 0
	return mark, del
}

// podDone says the step owes the pod nothing more, whatever finalizers keep its object.
func podDone(p *corev1.Pod) bool {
	mark, del := podNeeds(p)
	return !mark && !del
}

// maxNamed is how many pods a step message names.
const maxNamed = 3

func podNames(pods []corev1.Pod) string {
	var names []string
	for i := range pods {
		names = append(names, pods[i].Namespace+"/"+pods[i].Name)
	}
	return firstFew(names)
}

// heldBy names the pods and the finalizers that keep them, e.g. "db/db-0 (example.com/hold)".
func heldBy(pods []corev1.Pod) string {
	var names []string
	for i := range pods {
		names = append(names, fmt.Sprintf("%s/%s (%s)", pods[i].Namespace, pods[i].Name, strings.Join(pods[i].Finalizers, ", ")))
	}
	return firstFew(names)
}

func firstFew(names []string) string {
	if len(names) <= maxNamed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamed], ", "), len(names)-maxNamed)
}

// countOf is "1 pod", "2 pods".
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// PodWriters bounds the pods one fence marks and deletes at once: a node's pods (up to the
// kubelet's 110) go in a few round trips instead of one after another.
const PodWriters = 16

// forceDeleteAll marks and deletes the pods, PodWriters at a time (each pod's own writes in
// order), and returns how many this pass deleted and the first error.
func (r *NodeFenceReconciler) forceDeleteAll(ctx context.Context, nf *v1alpha1.NodeFence, pods []corev1.Pod) (int32, error) {
	var (
		mu       sync.Mutex
		deleted  int32
		firstErr error
	)
	workqueue.ParallelizeUntil(ctx, PodWriters, len(pods), func(i int) {
		d, err := r.forceDelete(ctx, nf, &pods[i])
		mu.Lock()
		defer mu.Unlock()
		if d {
			deleted++
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	})
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return deleted, firstErr
}

func (r *NodeFenceReconciler) podsToDelete(ctx context.Context, node string) ([]corev1.Pod, error) {
	var list corev1.PodList
	sel := fields.OneTermEqualSelector("spec.nodeName", node)
	if err := r.APIReader.List(ctx, &list, client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if !v1alpha1.ToleratesOutOfService(p.Spec.Tolerations) {
			out = append(out, p)
		}
	}
	return out, nil
}

// forceDelete marks the pod Failed with a DisruptionTarget condition (KEP-3329, as PodGC does),
// then deletes it with grace period 0. deleted says whether this call released the pod: it
// deleted it, or it marked it Failed and found it gone. The second is a race the pod's owner
// often wins: the StatefulSet controller deletes a Failed pod at once, and the API server removes
// a terminal pod without a grace period. Either way, a pod is counted by the one call that
// finished it, so a retry never counts it twice.
func (r *NodeFenceReconciler) forceDelete(ctx context.Context, nf *v1alpha1.NodeFence, pod *corev1.Pod) (deleted bool, err error) {
	mark, del := podNeeds(pod)
	if mark {
		ours, err := r.markFailed(ctx, nf, pod)
		if err != nil || !ours {
			return false, err
		}
	}
	if !del {
		return false, nil
	}
	err = r.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return mark, nil // gone, or replaced by a new pod of the same name: released by this call's mark, if it marked it
	}
	if err != nil {
		return false, fmt.Errorf("force-deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return true, nil
}

// markFailed sets the pod's phase Failed with its DisruptionTarget condition, on this very pod
// only: the patch carries the resourceVersion listed, so that a pod of the same name made since
// (the original deleted by someone else, PodGC on the out-of-service node, and replaced by its
// StatefulSet on a healthy node) is never marked. On a conflict it reads the pod again and
// marks it only while it is still the one listed (same UID, still on the fenced node). ours is
// false when the pod listed is gone or replaced: not this fence's to release.
func (r *NodeFenceReconciler) markFailed(ctx context.Context, nf *v1alpha1.NodeFence, pod *corev1.Pod) (ours bool, err error) {
	for attempt := 0; ; attempt++ {
		patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
		pod.Status.Phase = corev1.PodFailed
		setPodCondition(pod, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: ReasonDisruption,
			Message:            fmt.Sprintf("Palisade: node %s is fenced (%s, confirmed); the pod was force-deleted", nf.Spec.NodeName, nf.Status.Method),
			LastTransitionTime: metav1.NewTime(r.now()),
		})
		err := r.Client.Status().Patch(ctx, pod, patch)
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err) || attempt == 2:
			return false, fmt.Errorf("marking pod %s/%s failed: %w", pod.Namespace, pod.Name, err)
		}
		uid := pod.UID
		fresh := &corev1.Pod{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), fresh); err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, fmt.Errorf("reading pod %s/%s again to mark it failed: %w", pod.Namespace, pod.Name, err)
		}
		if fresh.UID != uid || fresh.Spec.NodeName != nf.Spec.NodeName {
			return false, nil
		}
		*pod = *fresh
		if mark, _ := podNeeds(pod); !mark {
			// Ended meanwhile (Succeeded by itself, or Failed by PodGC with its own
			// DisruptionTarget): its end stays as written; it is only to be deleted.
			return true, nil
		}
	}
}

func setPodCondition(pod *corev1.Pod, c corev1.PodCondition) {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == c.Type {
			pod.Status.Conditions[i] = c
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, c)
}
