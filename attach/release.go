package attach

import (
	"context"
	"fmt"
	"slices"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	attachercontroller "github.com/kubernetes-csi/external-attacher/v4/pkg/controller"
)

// DefaultForceAfter is how long a deleted attachment whose attacher reports a detach error may
// wait for the attacher's retries before its finalizer is removed.
const DefaultForceAfter = 30 * time.Second

// Result says what one Release call found and did.
type Result struct {
	// Deleted counts the attachments deleted by this call.
	Deleted int
	// FinalizersRemoved counts the attacher finalizers removed by this call.
	FinalizersRemoved int
	// Remaining names the node's attachments that still exist.
	Remaining []string
}

// Releaser deletes a node's VolumeAttachments. Reader should read from the API server, not a
// cache: attachments are listed only when a node is released.
type Releaser struct {
	Reader     client.Reader
	Writer     client.Writer
	ForceAfter time.Duration
	Now        func() time.Time
}

// Release makes one pass over the node's attachments; it is idempotent and done when
// Result.Remaining is empty.
func (r *Releaser) Release(ctx context.Context, node string) (Result, error) {
	var list storagev1.VolumeAttachmentList
	if err := r.Reader.List(ctx, &list); err != nil {
		return Result{}, fmt.Errorf("listing volume attachments: %w", err)
	}
	var res Result
	for i := range list.Items {
		va := &list.Items[i]
		if va.Spec.NodeName != node {
			continue
		}
		gone, err := r.releaseOne(ctx, va, &res)
		if err != nil {
			return res, err
		}
		if !gone {
			res.Remaining = append(res.Remaining, va.Name)
		}
	}
	return res, nil
}

// releaseOne deletes va, or frees it from a stuck attacher; it reports whether va is gone.
func (r *Releaser) releaseOne(ctx context.Context, va *storagev1.VolumeAttachment, res *Result) (bool, error) {
	if va.DeletionTimestamp == nil {
		if err := r.Writer.Delete(ctx, va, client.Preconditions{UID: &va.UID}); err != nil {
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, fmt.Errorf("deleting volume attachment %s: %w", va.Name, err)
		}
		res.Deleted++
		return len(va.Finalizers) == 0, nil
	}
	finalizer := attachercontroller.GetFinalizerName(va.Spec.Attacher)
	if !slices.Contains(va.Finalizers, finalizer) || !r.attacherStuck(va) {
		return false, nil
	}
	patch := client.MergeFromWithOptions(va.DeepCopy(), client.MergeFromWithOptimisticLock{})
	va.Finalizers = slices.DeleteFunc(va.Finalizers, func(f string) bool { return f == finalizer })
	if err := r.Writer.Patch(ctx, va, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("removing finalizer %s from volume attachment %s: %w", finalizer, va.Name, err)
	}
	res.FinalizersRemoved++
	return len(va.Finalizers) == 0, nil
}

// attacherStuck says whether the attacher has said that it cannot detach va: it reported a
// detach error, and va has waited ForceAfter since its deletion (time for the attacher's own
// retries to clear a passing error). An attacher that has not acted — down, restarting, or
// behind its work queue's back-off after an API server outage — is waited for, however long:
// removing its finalizer would skip its ControllerUnpublishVolume and leave the volume published
// to the fenced node in the storage backend, which then refuses a single-node volume to the
// replacement's node for good. And the replacement's attach needs that attacher anyway.
func (r *Releaser) attacherStuck(va *storagev1.VolumeAttachment) bool {
	if va.Status.DetachError == nil {
		return false
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	return now().Sub(va.DeletionTimestamp.Time) >= r.Force()
}

// Force is how long a deleted attachment whose attacher reports a detach error waits before its
// finalizer is removed: ForceAfter, or DefaultForceAfter when that is zero.
func (r *Releaser) Force() time.Duration {
	if r.ForceAfter == 0 {
		return DefaultForceAfter
	}
	return r.ForceAfter
}
