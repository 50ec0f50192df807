package fencing

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// A storage fence (a method whose kind is lifted) outlives the fence's work: the node stays cut
// off from its storage after the release, until a person deletes the NodeFence once the node is
// repaired. The finalizer FinalizerLiftStorageFence, put on the NodeFence before such a method's
// first command, holds the deletion until every storage fence it put up is lifted and read back.
//
// A fence is lifted only when lifting it cannot let two copies of a workload write: while the
// node carries the out-of-service taint (its pods may have been deleted and started elsewhere,
// and the node not yet repaired), the lifting waits and says what to do. A node that no longer
// exists keeps its storage fence: its machine may still run with those addresses.

const (
	// retryLift is how often a lifting that waits (for the taint's removal, for the storage) is
	// looked at again.
	retryLift = 2 * time.Second
	// ReasonAwaitingNodeRepair (StorageFenceLifted=False): the node still carries the
	// out-of-service taint.
	ReasonAwaitingNodeRepair = "AwaitingNodeRepair"
	// ReasonLifting (StorageFenceLifted=False): the storage is lifting the fence.
	ReasonLifting = "Lifting"
	// ReasonStorageFenceLifted (event): every storage fence of the NodeFence was lifted.
	ReasonStorageFenceLifted = "StorageFenceLifted"
	// ReasonStorageFenceKept (event): the node no longer exists, or its fence's release began and
	// the node then showed life, or it released without the taint; its storage fence stays.
	ReasonStorageFenceKept = "StorageFenceKept"
	// ConditionStorageFenceLifted says, on a NodeFence being deleted, how the lifting of its
	// storage fences goes.
	ConditionStorageFenceLifted = "StorageFenceLifted"
)

// holdForLift puts FinalizerLiftStorageFence on the NodeFence before a storage fence is put up.
// It patches a copy and takes only the new metadata back, so the record being written stays.
func (r *NodeFenceReconciler) holdForLift(ctx context.Context, nf *v1alpha1.NodeFence) error {
	if controllerutil.ContainsFinalizer(nf, v1alpha1.FinalizerLiftStorageFence) {
		return nil
	}
	cp := nf.DeepCopy()
	patch := client.MergeFromWithOptions(nf.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(cp, v1alpha1.FinalizerLiftStorageFence)
	if err := r.Client.Patch(ctx, cp, patch); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", v1alpha1.FinalizerLiftStorageFence, err)
	}
	nf.Finalizers, nf.ResourceVersion = cp.Finalizers, cp.ResourceVersion
	return nil
}

// finishDeletion handles a NodeFence being deleted: nothing more is taken for it, every method
// is ended, and its storage fences are lifted before its finalizer goes.
func (r *NodeFenceReconciler) finishDeletion(ctx context.Context, nf *v1alpha1.NodeFence) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(nf, v1alpha1.FinalizerLiftStorageFence) {
		return ctrl.Result{}, nil
	}
	r.endMethods(ctx, nf)
	node := &corev1.Node{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("reading node %s: %w", nf.Spec.NodeName, err)
	}
	if err != nil || !node.DeletionTimestamp.IsZero() || registeredAnew(nf, node) {
		// A node being deleted is as good as gone: its deletion starts a new fence, which
		// replaces this one, and nobody found its machine clean. A Node registered anew under
		// the name (another UID) is not the fenced machine: its taint, or the lack of one, says
		// nothing of whether that machine was repaired.
		r.event(ctx, nf, corev1.EventTypeWarning, ReasonStorageFenceKept,
			"node %s no longer exists, is being deleted or was registered anew (the Node is not the one fenced): its storage fence stays (%s), since the fenced machine may still run with those addresses; delete it at the storage once the machine is wiped",
			nf.Spec.NodeName, strings.Join(r.storageFences(nf), ", "))
		return ctrl.Result{}, r.letGoOfFence(ctx, nf)
	}
	if why, keep := untaintedAfterRelease(nf); keep {
		r.event(ctx, nf, corev1.EventTypeWarning, ReasonStorageFenceKept,
			"node %s: %s (%s so far): its storage fence stays (%s), since a replacement may write beside the original and no taint's removal by a person can say the node was repaired; lift it at the storage once you have made sure only one of them runs",
			nf.Spec.NodeName, why, releasedCounts(nf), strings.Join(r.storageFences(nf), ", "))
		return ctrl.Result{}, r.letGoOfFence(ctx, nf)
	}
	if OutOfService(node) {
		return r.waitLift(ctx, nf, ReasonAwaitingNodeRepair, fmt.Sprintf(
			"the storage fence of node %s stays while the node carries the taint %s (its pods may run elsewhere): once the node is repaired and its workload stopped, remove the taint (kubectl taint node %s %s-) and the fence is lifted",
			nf.Spec.NodeName, v1alpha1.TaintOutOfService, nf.Spec.NodeName, v1alpha1.TaintOutOfService))
	}
	if err := leading(ctx, r.Leader); err != nil { // leading.go
		return notLeading(ctx, "lifting the storage fence of node "+nf.Spec.NodeName, err)
	}
	lifted, wait := r.lift(ctx, nf)
	if wait != nil {
		return r.waitLift(ctx, nf, wait.reason, wait.msg)
	}
	r.event(ctx, nf, corev1.EventTypeNormal, ReasonStorageFenceLifted, "storage fence of node %s lifted: %s", nf.Spec.NodeName, strings.Join(lifted, "; "))
	return ctrl.Result{}, r.letGoOfFence(ctx, nf)
}

// liftWait is why a lift is not done yet.
type liftWait struct{ reason, msg string }

// lift lifts every storage fence the NodeFence put up and reads each back, and returns what
// it lifted; wait says why when one is not lifted yet. The caller has made sure lifting is
// safe: the node's taint was removed by a person (deletion), or Palisade found it clean.
func (r *NodeFenceReconciler) lift(ctx context.Context, nf *v1alpha1.NodeFence) (lifted []string, wait *liftWait) {
	if len(r.storageFences(nf)) == 0 {
		return nil, nil
	}
	// A lift carries a token newer than the fence's, so that whoever carries it out refuses a
	// late copy of the fence's commands afterwards. It is recorded before the first lift is
	// sent, like a fence's own token, and reused: a controller holding a stale copy of the
	// record (a lost leader that resumes after the node was fenced again) cannot record one,
	// and one drawn for an older lift is older than any later fence of the node.
	if nf.Status.LiftToken == 0 && r.Tokens != nil {
		tok, err := r.Tokens.Next(ctx)
		if err != nil {
			return nil, &liftWait{ReasonTokenUnavailable, fmt.Sprintf("no fencing token for lifting the storage fence: %v", err)}
		}
		nf.Status.LiftToken = tok
		if err := r.saveStatus(ctx, nf); err != nil {
			nf.Status.LiftToken = 0
			return nil, &liftWait{ReasonAPIError, fmt.Sprintf("recording the lift's fencing token before lifting the storage fence (nothing is lifted until it is recorded): %v", err)}
		}
	} else if err := r.stillCurrent(ctx, nf); err != nil {
		// A token already on record: this copy of the record may be one a lost leader held
		// while the fence went on (recovered, the node fenced again under the same name), and
		// a lift addressed by node (csi-addons) would lift the newer fence's storage fence.
		return nil, &liftWait{ReasonAPIError, fmt.Sprintf("nothing is lifted from a copy of the record that may be stale: %v", err)}
	}
	liftToken := nf.Status.LiftToken
	for _, m := range nf.Spec.Methods {
		if !methodKinds[m.Type].lifted || !methodTaken(nf, m.Name) {
			continue
		}
		u, ok := r.Fencers[m.Type].(providers.Unfencer)
		if !ok {
			return nil, &liftWait{ReasonNoProvider, fmt.Sprintf("no provider that lifts fences is registered for method %s (type %s)", m.Name, m.Type)}
		}
		req := r.request(nf, m)
		req.LiftToken = liftToken
		st, err := u.Unfence(ctx, req)
		if err != nil {
			return nil, &liftWait{string(providers.ReasonOf(err)), fmt.Sprintf("lifting the fence of method %s: %v", m.Name, err)}
		}
		if st.State != providers.Confirmed {
			reason := string(st.Reason)
			if reason == "" {
				reason = ReasonLifting
			}
			return nil, &liftWait{reason, fmt.Sprintf("method %s: %s", m.Name, st.Message)}
		}
		lifted = append(lifted, fmt.Sprintf("%s: %s", m.Name, st.Message))
	}
	return lifted, nil
}

// stillCurrent reads the NodeFence from the API server and says why nf is not that record (another
// object under its name, or a later version), nil when it is.
func (r *NodeFenceReconciler) stillCurrent(ctx context.Context, nf *v1alpha1.NodeFence) error {
	now := &v1alpha1.NodeFence{}
	if err := r.reader().Get(ctx, client.ObjectKeyFromObject(nf), now); err != nil {
		return fmt.Errorf("reading NodeFence %s: %w", nf.Name, err)
	}
	switch {
	case now.UID != nf.UID:
		return fmt.Errorf("NodeFence %s is another object now (UID %s, this copy's %s)", nf.Name, now.UID, nf.UID)
	case now.ResourceVersion != nf.ResourceVersion:
		return fmt.Errorf("NodeFence %s changed since this copy was read (resourceVersion %s, this copy's %s)", nf.Name, now.ResourceVersion, nf.ResourceVersion)
	}
	return nil
}

// waitLift says on the NodeFence why its deletion waits (once per change: an event and the
// condition) and looks again later.
func (r *NodeFenceReconciler) waitLift(ctx context.Context, nf *v1alpha1.NodeFence, reason, msg string) (ctrl.Result, error) {
	if c := meta.FindStatusCondition(nf.Status.Conditions, ConditionStorageFenceLifted); c == nil || c.Reason != reason || c.Message != msg {
		setCondition(nf, ConditionStorageFenceLifted, metav1.ConditionFalse, reason, msg)
		if err := r.saveStatus(ctx, nf); err != nil {
			return ctrl.Result{}, err
		}
		typ := corev1.EventTypeNormal
		if reason != ReasonLifting {
			typ = corev1.EventTypeWarning
		}
		r.event(ctx, nf, typ, reason, "%s", msg)
	}
	return ctrl.Result{RequeueAfter: retryLift}, nil
}

// letGoOfFence removes FinalizerLiftStorageFence, so that the deletion goes on.
func (r *NodeFenceReconciler) letGoOfFence(ctx context.Context, nf *v1alpha1.NodeFence) error {
	patch := client.MergeFromWithOptions(nf.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(nf, v1alpha1.FinalizerLiftStorageFence)
	if err := r.Client.Patch(ctx, nf, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing finalizer %s: %w", v1alpha1.FinalizerLiftStorageFence, err)
	}
	return nil
}

// storageFences names the storage-fence methods the fence took.
func (r *NodeFenceReconciler) storageFences(nf *v1alpha1.NodeFence) []string {
	var out []string
	for _, m := range nf.Spec.Methods {
		if methodKinds[m.Type].lifted && methodTaken(nf, m.Name) {
			out = append(out, fmt.Sprintf("method %s (%s)", m.Name, m.Type))
		}
	}
	return out
}

// methodTaken says whether the record holds a fence step of the method: its command may have
// reached the storage.
func methodTaken(nf *v1alpha1.NodeFence, method string) bool {
	for _, s := range nf.Status.Steps {
		if s.Method == method && isFenceStep(s.Name) {
			return true
		}
	}
	return false
}

// OutOfService says whether the node carries the out-of-service taint, whoever added it.
func OutOfService(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == v1alpha1.TaintOutOfService {
			return true
		}
	}
	return false
}

// untaintedAfterRelease says, from the fence's step record (each step is recorded before it is
// taken, so a release step on record may have acted, whatever the counters say), whether its
// release began and the node has not carried the fence's out-of-service taint since it last
// could: the release began without a Taint step (release.outOfServiceTaint off), or the node
// showed life after a release step and Palisade took its taint back (liveness.go), whether the
// fence then failed or went on to its next method. A missing taint then says nothing of a
// repair, and the storage fence may be all that keeps the original from writing beside its
// replacement. A Taint step that succeeded after the last such sign of life puts it back in
// a person's hands: the taint's removal again means the node was repaired.
func untaintedAfterRelease(nf *v1alpha1.NodeFence) (why string, keep bool) {
	released, tainted := false, false
	for _, s := range nf.Status.Steps {
		// A sign of life found between release steps fails the release step it was found in.
		// The step looks for one before it acts (take), so a step stopped by one at its first
		// attempt did nothing; at a later attempt, its earlier ones may have. A step resumed by
		// a controller that did not begin it counts one attempt more (takeAndRecord): the one
		// that began it may have acted and died unrecorded.
		acted := s.MayHaveActed()
		switch {
		case disproved(s) && (released || (releaseStep(s.Name) && acted)):
			released, tainted = true, false
			why = fmt.Sprintf("it showed life after its fence had begun releasing its workload (%s, step %s of %s), and Palisade took its out-of-service taint back",
				s.Reason, s.Name, s.StartTime.Format(time.RFC3339))
		case releaseStep(s.Name) && acted:
			released = true
			if s.Name == v1alpha1.StepTaint && s.State == v1alpha1.StepSucceeded {
				tainted, why = true, ""
			}
		}
	}
	if !released || tainted {
		return "", false
	}
	if why == "" {
		why = "its fence began releasing its workload without the out-of-service taint (release.outOfServiceTaint off)"
	}
	return why, true
}

// releaseStep says whether a step releases the node's workload or volumes: a step of the
// release sequence other than VerifyFenced, which only watches.
func releaseStep(n v1alpha1.StepName) bool {
	return n != v1alpha1.StepVerifyFenced && slices.Contains(releaseSequence, n)
}
