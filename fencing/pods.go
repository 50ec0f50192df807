package fencing

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

var outOfServiceTaint = corev1.Taint{
	Key: v1alpha1.TaintOutOfService, Value: v1alpha1.TaintOutOfServiceValue, Effect: corev1.TaintEffectNoExecute,
}

// deletePods force-deletes the pods bound to the fenced node, listed from the API server by
// spec.nodeName. Pods that tolerate the out-of-service taint are left alone, as Kubernetes does.
func (r *NodeFenceReconciler) deletePods(ctx context.Context, nf *v1alpha1.NodeFence) outcome {
	pods, err := r.podsToDelete(ctx, nf.Spec.NodeName)
	if err != nil {
		return pending(retryRelease, ReasonAPIError, "listing pods: %v", err)
	}
	for i := range pods {
		if err := r.forceDelete(ctx, nf, &pods[i]); err != nil {
			return pending(retryRelease, ReasonAPIError, "%v", err)
		}
		nf.Status.PodsDeleted++
	}
	left, err := r.podsToDelete(ctx, nf.Spec.NodeName)
	if err != nil || len(left) > 0 {
		return pending(retryRelease, ReasonPodsRemaining, "%d pods still bound to the node", len(left))
	}
	return done("%d pods force-deleted", nf.Status.PodsDeleted)
}

func (r *NodeFenceReconciler) podsToDelete(ctx context.Context, node string) ([]corev1.Pod, error) {
	var list corev1.PodList
	sel := fields.OneTermEqualSelector("spec.nodeName", node)
	if err := r.APIReader.List(ctx, &list, client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if !tolerates(p.Spec.Tolerations) {
			out = append(out, p)
		}
	}
	return out, nil
}

func tolerates(ts []corev1.Toleration) bool {
	for i := range ts {
		if ts[i].ToleratesTaint(logr.Discard(), &outOfServiceTaint, false) {
			return true
		}
	}
	return false
}

// forceDelete marks the pod Failed with a DisruptionTarget condition (KEP-3329, as PodGC does),
// then deletes it with grace period 0.
func (r *NodeFenceReconciler) forceDelete(ctx context.Context, nf *v1alpha1.NodeFence, pod *corev1.Pod) error {
	if pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded {
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Status.Phase = corev1.PodFailed
		setPodCondition(pod, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: ReasonDisruption,
			Message:            fmt.Sprintf("Palisade: node %s is fenced (%s, confirmed); the pod was force-deleted", nf.Spec.NodeName, nf.Status.Method),
			LastTransitionTime: metav1.NewTime(r.now()),
		})
		if err := r.Client.Status().Patch(ctx, pod, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("marking pod %s/%s failed: %w", pod.Namespace, pod.Name, err)
		}
	}
	err := r.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("force-deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
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
