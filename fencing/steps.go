package fencing

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

const (
	retryFence   = 2 * time.Second
	retryConfirm = 500 * time.Millisecond
	retryRelease = time.Second
	// retryStuck: a release step that waits for a person (the error says what to do).
	retryStuck = 30 * time.Second
)

// providerFailure turns a provider error into a retry or, when it cannot help or the method
// has run out of time, a failed method.
func providerFailure(req providers.Request, doing string, err error) outcome {
	reason, m := string(providers.ReasonOf(err)), req.Method
	hint := ""
	if h := providers.HintOf(err); h != "" {
		hint = ". " + h
	}
	if !providers.IsRetryable(err) {
		return failed(reason, "%s through method %s: %v%s", doing, m.Name, err, hint)
	}
	if req.Expired {
		return failed(reason, "%s through method %s: no success within its timeout %s; last error: %v%s", doing, m.Name, methodTimeout(m), err, hint)
	}
	return pending(retryFence, reason, "%s: %v (retrying)", doing, err)
}

func (r *NodeFenceReconciler) timedOut(nf *v1alpha1.NodeFence, m v1alpha1.Method) bool {
	return r.pastTimeout(nf, m, 0)
}

// pastTimeout says whether the method's timeout plus grace has passed since it started.
func (r *NodeFenceReconciler) pastTimeout(nf *v1alpha1.NodeFence, m v1alpha1.Method, grace time.Duration) bool {
	start := nf.Status.MethodStartTime
	return start != nil && r.now().Sub(start.Time) >= methodTimeout(m)+grace
}

// bootReadGrace is how long past its method's timeout a confirmation waits for the node's boot
// ID to be read with it (noteBoots) before the method fails: a read failing once, near the
// timeout, does not fail a fence that happened.
const bootReadGrace = 30 * time.Second

// taint adds node.kubernetes.io/out-of-service=nodeshutdown:NoExecute to the fenced Node: not
// to one registered anew under its name since sameNode looked (its own read is checked too, and
// its patch carries the resourceVersion read).
func (r *NodeFenceReconciler) taint(ctx context.Context, nf *v1alpha1.NodeFence) outcome {
	node := &corev1.Node{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return done("node object is gone; nothing to taint")
		}
		return pending(retryRelease, ReasonAPIError, "reading node: %v", err)
	}
	if registeredAnew(nf, node) { // since sameNode read it; the patch below fails on a change after this read
		return nodeReplaced(nf, node)
	}
	for _, t := range node.Spec.Taints {
		if t.Key == v1alpha1.TaintOutOfService && t.Effect == corev1.TaintEffectNoExecute {
			// Not stamped by this step (a retry finds its own first try's taint, stamped at or
			// after the step's start): someone else's, which recovery must leave.
			if since, ok := taintedSinceConfirmation(nf); ok && !addedBy(t, since) {
				nf.Status.TaintFound = true
				return done("taint %s=%s:NoExecute present, put there by someone else (added %s): counted as this step's, and left on the node at recovery", t.Key, t.Value, taintAddedText(t))
			}
			return done("taint %s=%s:NoExecute present", t.Key, t.Value)
		}
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	// Stamped with the start of the fence's first Taint step since its confirmation, as
	// recorded, not with this leader's clock: a step resumed by a leader whose clock is behind
	// the one that began it would stamp a time before the start, and its retry (its success's
	// write lost) or the node's life would take the fence's own taint for someone else's
	// (addedBy), keeping it on a node that runs.
	stamp := r.now()
	if since, ok := taintedSinceConfirmation(nf); ok {
		stamp = since
	}
	added := metav1.NewTime(stamp)
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{
		Key: v1alpha1.TaintOutOfService, Value: v1alpha1.TaintOutOfServiceValue,
		Effect: corev1.TaintEffectNoExecute, TimeAdded: &added,
	})
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return pending(retryRelease, ReasonAPIError, "tainting node: %v", err)
	}
	// The taint is this fence's own, whatever an earlier confirmation's Taint step found (one
	// disproved since, its method's successor confirmed now): recovery removes it.
	nf.Status.TaintFound = false
	return done("added taint %s=%s:NoExecute", v1alpha1.TaintOutOfService, v1alpha1.TaintOutOfServiceValue)
}

// releaseAttachments deletes the node's VolumeAttachments. A stuck attacher's finalizer is
// removed only for a node that can no longer write to its volumes (checksLiveness: not a node
// the Executor left running).
func (r *NodeFenceReconciler) releaseAttachments(ctx context.Context, nf *v1alpha1.NodeFence) outcome {
	nodeRuns := !checksLiveness(nf)
	var force func([]string) error
	if !nodeRuns {
		force = func(freeing []string) error { return r.recordForced(ctx, nf, freeing) }
	}
	res, err := r.Attachments.Release(ctx, nf.Spec.NodeName, force, fencedAt(nf))
	nf.Status.AttachmentsReleased += int32(res.Deleted)
	if len(res.Forced) > 0 {
		r.event(ctx, nf, corev1.EventTypeWarning, ReasonAttachmentsForced,
			"freed %s of node %s from its CSI attacher, which reported a detach error for %s: ControllerUnpublishVolume never succeeded, so the storage system may still publish the volume to the node; if it cannot be attached elsewhere, unpublish it from node %s in the storage system: %s",
			countOf(len(res.Forced), "volume attachment"), nf.Spec.NodeName, r.Attachments.Force(), nf.Spec.NodeName, strings.Join(res.Forced, ", "))
	}
	if err != nil {
		return pending(retryRelease, ReasonAPIError, "releasing attachments: %v", err)
	}
	if len(res.InUse) > 0 && !stepEnabled(nf, v1alpha1.StepTaint) && !stepEnabled(nf, v1alpha1.StepDeletePods) {
		// Nothing of the release removes those pods: their attachments stay, as Kubernetes keeps them.
		res.Kept, res.InUse = append(res.Kept, res.InUse...), nil
	}
	if len(res.InUse) > 0 {
		return pending(retryRelease, ReasonAttachmentsRemaining,
			"waiting for the pods still on the node that use the volumes of %s to go before releasing them: %s; a pod of the node is deleted by DeletePods, or with the policy's deletePods off by Kubernetes (the out-of-service taint's eviction, then PodGC)",
			countOf(len(res.InUse), "volume attachment"), firstFew(res.InUse))
	}
	if len(res.Remaining) > 0 && nodeRuns {
		return pending(retryRelease, ReasonAttachmentsRemaining,
			"waiting for %s to go: %s; the CSI attacher detaches each (ControllerUnpublishVolume) and then removes its finalizer. Node %s runs (method %s stopped its workload), its volumes still mounted, so Palisade never removes the finalizer itself: if the attacher keeps failing, unmount the volumes on the node or power it off",
			countOf(len(res.Remaining), "volume attachment"), firstFew(res.Remaining), nf.Spec.NodeName, nf.Status.Method)
	}
	if len(res.Remaining) > 0 {
		return pending(retryRelease, ReasonAttachmentsRemaining,
			"waiting for %s to go: %s; the CSI attacher detaches each (ControllerUnpublishVolume) and then removes its finalizer, which Palisade removes only after the attacher has reported a detach error for %s: if none goes, check that the driver's attacher runs",
			countOf(len(res.Remaining), "volume attachment"), firstFew(res.Remaining), r.Attachments.Force())
	}
	msg := countOf(int(nf.Status.AttachmentsReleased), "volume attachment") + " of the node released"
	if len(res.Kept) > 0 {
		msg += fmt.Sprintf("; kept %s whose volume a pod left on the node uses (one tolerating the out-of-service taint, one created after the confirmation, or any with the policy's outOfServiceTaint and deletePods off: it is not deleted, and Kubernetes keeps them attached too): %s",
			countOf(len(res.Kept), "attachment"), firstFew(res.Kept))
	}
	if len(res.HeldByOthers) > 0 {
		msg += fmt.Sprintf("; %s deleted and let go by the attacher, kept only by other finalizers (another controller's business): %s",
			countOf(len(res.HeldByOthers), "attachment"), firstFew(res.HeldByOthers))
	}
	if forced := nf.Status.AttachmentsForced; len(forced) > 0 {
		msg += fmt.Sprintf("; freed from a CSI attacher that kept failing to detach them, without a detach (the storage system may still publish their volumes to the node: check it there): %s",
			strings.Join(forced, ", "))
	}
	return done("%s", msg)
}

// recordForced records, before they are freed from their stuck attacher, the attachments a
// release is about to free (status.attachmentsForced): a controller killed between the removal
// of their finalizers and the step's record would otherwise leave no record of what a failing
// fence's condition and the CLI's verdict must say, that the storage system may still publish
// their volumes to the node. Names already recorded (an attempt that recorded them and did not
// get to free them) are not recorded twice.
func (r *NodeFenceReconciler) recordForced(ctx context.Context, nf *v1alpha1.NodeFence, freeing []string) error {
	fresh := slices.DeleteFunc(slices.Clone(freeing), func(n string) bool { return slices.Contains(nf.Status.AttachmentsForced, n) })
	if len(fresh) == 0 {
		return nil
	}
	was := nf.Status.AttachmentsForced
	nf.Status.AttachmentsForced = addNames(was, fresh, v1alpha1.MaxAttachmentsForced)
	if err := r.saveStatus(ctx, nf); err != nil {
		nf.Status.AttachmentsForced = was // none is freed: the step's own record must not say so
		return err
	}
	return nil
}

// addNames appends names to list, keeping at most max entries (max ≥ 2): past that, the last
// one says how many more there were ("and 3 more"), counted across calls. A list longer than max
// (a record written under a larger bound) is cut back to it, what is cut counted.
func addNames(list, names []string, max int) []string {
	more := 0
	if n := len(list); n > 0 {
		var m int
		if _, err := fmt.Sscanf(list[n-1], "and %d more", &m); err == nil {
			more, list = m, list[:n-1]
		}
	}
	list = append(slices.Clip(list), names...)
	if len(list) > max || more > 0 && len(list) > max-1 { // a summary needs the last entry
		more += len(list) - (max - 1)
		list = list[:max-1]
	}
	if more > 0 {
		list = append(list, fmt.Sprintf("and %d more", more))
	}
	return list
}
