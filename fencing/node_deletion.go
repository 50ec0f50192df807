package fencing

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// Node deletion is a fence request. Deleting a Node means "permanently partitioned" (the 2016
// Pod Safety proposal), and PodGC then force-deletes the node's pods, fence or not. A node a
// policy covers therefore carries Palisade's finalizer: its deletion creates a NodeFence
// (trigger NodeDeleted), and the finalizer goes only once that fence is confirmed and verified
// (a provider that reads the machine back as gone confirms it too). A fence that fails holds
// the deletion and says what to do.

// keepFinalizer puts the finalizer on a node a policy covers (not a dry run) and takes it off
// a node no policy covers any more, unless a fence of the node is still on record and not over:
// its spec was copied from the policy, it goes on without it, and the node's deletion must wait
// for it as before (the policy deleted, switched to a dry run, or no longer selecting the node
// mid-fence).
func (r *NodeReconciler) keepFinalizer(ctx context.Context, node *corev1.Node, p *v1alpha1.FencingPolicy) error {
	want := p != nil && !p.Spec.DryRun
	if want == controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerFenceOnDelete) {
		return nil
	}
	if !want {
		held, err := r.fenceOnRecord(ctx, node.Name)
		if err != nil || held {
			return err
		}
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if want {
		controllerutil.AddFinalizer(node, v1alpha1.FinalizerFenceOnDelete)
	} else {
		controllerutil.RemoveFinalizer(node, v1alpha1.FinalizerFenceOnDelete)
	}
	if err := r.Client.Patch(ctx, node, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("updating the finalizer of node %s: %w", node.Name, err)
	}
	return nil
}

// fenceOnRecord says whether the node has a NodeFence that fences for real and is not over:
// not a dry run's record, not Recovered, not being deleted.
func (r *NodeReconciler) fenceOnRecord(ctx context.Context, node string) (bool, error) {
	nf := &v1alpha1.NodeFence{}
	if err := r.reader().Get(ctx, client.ObjectKey{Name: node}, nf); err != nil { // not a cache behind a fence just made
		return false, client.IgnoreNotFound(err)
	}
	return !nf.Spec.DryRun && nf.Status.Phase != v1alpha1.PhaseRecovered && nf.DeletionTimestamp.IsZero(), nil
}

// deleted handles a node being deleted: fence it, then let the deletion go on. The fence is
// read from the API server, not the cache: letting the deletion go lets PodGC force-delete
// the node's pods, and a cache behind (a new leader's) may still show a fence verified that the
// record since says the node's signs of life disproved.
func (r *NodeReconciler) deleted(ctx context.Context, node *corev1.Node) error {
	if !controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerFenceOnDelete) {
		return nil
	}
	nf := &v1alpha1.NodeFence{}
	err := r.reader().Get(ctx, client.ObjectKey{Name: node.Name}, nf)
	if apierrors.IsNotFound(err) {
		return r.fenceDeleted(ctx, node, nil)
	}
	if err != nil {
		return err
	}
	if nf.Status.Phase == v1alpha1.PhaseRecovered {
		return r.fenceDeleted(ctx, node, nf) // that fence ended: the machine runs again
	}
	switch {
	case nf.Spec.DryRun:
		// A dry run's record took no step: the node's policy now decides (fenceDeleted lets the
		// deletion go while it is still a dry run, and fences for real once it is not).
		return r.fenceDeleted(ctx, node, nf)
	case nf.Status.Phase == v1alpha1.PhaseReleased && fenceTaintGone(nf, node):
		// The fence put its taint on, and the node no longer carries it: taken off by hand and
		// the node back in service, or a new Node registered under the name. Its confirmation
		// covered a workload that may run again, or another machine: fence anew.
		return r.fenceDeleted(ctx, node, nf)
	case Verified(nf) || nf.Status.Phase == v1alpha1.PhaseReleased:
		// The Node as the API server has it: the cache's copy has no managedFields (the
		// manager's cache strips them), which say when the kubelet last wrote (readyPostedAfter).
		fresh := &corev1.Node{}
		if err := r.reader().Get(ctx, client.ObjectKeyFromObject(node), fresh); err != nil {
			if apierrors.IsNotFound(err) {
				return nil // gone meanwhile
			}
			return fmt.Errorf("reading node %s before letting its deletion go on: %w", node.Name, err)
		}
		if why := uncovered(nf, fresh); why != "" {
			if nf.Status.Phase != v1alpha1.PhaseReleased {
				return nil // under way: its release steps read the node's signs of life and end it
			}
			r.Recorder.Eventf(node, nf, corev1.EventTypeWarning, ReasonDeletionHeld, "Delete",
				"deletion of node %s is held: its released fence no longer covers what runs there (%s), so it is fenced anew before PodGC force-deletes its pods", node.Name, why)
			return r.fenceDeleted(ctx, node, nf)
		}
		return r.letGo(ctx, node, corev1.EventTypeNormal, "node %s is fenced (%s, confirmed and no sign of life after): its deletion goes on", node.Name, nf.Status.Method)
	case nf.Status.Phase == v1alpha1.PhaseFailed:
		msg := "no condition recorded"
		if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionFenced); c != nil {
			msg = c.Message
		}
		r.Recorder.Eventf(node, nf, corev1.EventTypeWarning, ReasonDeletionHeld, "Delete",
			"deletion of node %s is held: its fence failed (%s). Fix the method and delete NodeFence %s to try again; "+
				"only if you have made sure the machine is off, let the deletion go on by hand: %s",
			node.Name, msg, nf.Name, removeFinalizerCommand(node))
	}
	return nil // a fence is under way: its progress wakes this node again
}

// uncovered says why the fence's confirmation no longer covers the Node being deleted, "" when
// it does: the power-off was disproved (the machine never lost power), the Node is another one
// registered under the name (its UID), or its kubelet posted its status after the fence (a
// kubelet restarted without a reboot, a machine powered on again). Letting the deletion go then
// would have PodGC force-delete pods that may run, beside their replacements. The taint taken
// off by hand is fenceTaintGone's case.
func uncovered(nf *v1alpha1.NodeFence, node *corev1.Node) string {
	switch {
	case nf.Status.PowerOffDisprovedTime != nil:
		return "its power-off was disproved: the machine never lost power"
	case registeredAnew(nf, node):
		return fmt.Sprintf("the Node is another one registered under its name (UID %s, the fenced one's %s)", node.UID, fencedUID(nf))
	}
	if at, ok := readyPostedAfter(node, nf.Status.FencedTime); ok {
		return fmt.Sprintf("its kubelet posted its status at %s, after the fence's confirmation", at.Format(time.RFC3339))
	}
	return ""
}

// fenceDeleted creates the NodeDeleted fence, or lets the deletion go when nothing covers the
// node any more.
func (r *NodeReconciler) fenceDeleted(ctx context.Context, node *corev1.Node, previous *v1alpha1.NodeFence) error {
	p, err := policyFor(ctx, r.Client, node)
	if err != nil {
		return err
	}
	if p == nil {
		return r.letGo(ctx, node, corev1.EventTypeNormal, "no FencingPolicy covers node %s any more", node.Name)
	}
	if p.Spec.DryRun {
		return r.letGo(ctx, node, corev1.EventTypeNormal, "dry run: policy %s would fence node %s with %s before its deletion goes on", p.Name, node.Name, methodNames(&v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{Methods: p.Spec.Methods}}))
	}
	nf := newNodeFence(node, p, v1alpha1.TriggerNodeDeleted,
		"the Node was deleted: a deleted node counts as permanently partitioned, and its pods would be force-deleted with no fence")
	r.noteWaiting(ctx, node, p, nf)
	_, err = r.create(ctx, node, nf, previous, fmt.Sprintf("node deleted; its deletion waits on finalizer %s until the fence is confirmed", v1alpha1.FinalizerFenceOnDelete))
	return err
}

// letGo removes the finalizer so that the deletion goes on, and says why.
func (r *NodeReconciler) letGo(ctx context.Context, node *corev1.Node, typ, format string, args ...any) error {
	// Its pods are force-deleted once the Node is gone, as by a release (leading.go).
	if err := leading(ctx, r.Leader); err != nil {
		return fmt.Errorf("not letting the deletion of node %s go on: %w", node.Name, err)
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(node, v1alpha1.FinalizerFenceOnDelete)
	if err := r.Client.Patch(ctx, node, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing the finalizer of deleted node %s: %w", node.Name, err)
	}
	msg := fmt.Sprintf(format, args...)
	ctrl.LoggerFrom(ctx).Info("deletion of the node goes on", "why", msg)
	r.Recorder.Eventf(node, nil, typ, ReasonDeletionReleased, "Delete", "%s", msg)
	return nil
}

// removeFinalizerCommand is the kubectl command that removes Palisade's finalizer, and only it.
func removeFinalizerCommand(node *corev1.Node) string {
	i := slices.Index(node.Finalizers, v1alpha1.FinalizerFenceOnDelete)
	return fmt.Sprintf(`kubectl patch node %s --type=json -p '[{"op":"test","path":"/metadata/finalizers/%d","value":"%s"},{"op":"remove","path":"/metadata/finalizers/%d"}]'`,
		node.Name, i, v1alpha1.FinalizerFenceOnDelete, i)
}
