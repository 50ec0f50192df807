package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// Own writes. A fence's reconcile reads its NodeFence from the controller's cache, and the cache
// lags the API server when the API server is busy (a rack of fences on a cluster of thousands of
// nodes). A reconcile that reads the record as it was before this controller's own last write
// takes its step against a stale record, its write is refused ("the object has been modified"),
// and the work queue's back-off then holds the fence for up to twice the lag. So the reconciler
// remembers the resourceVersion of its last write of each fence and, while the cache shows
// another, reads the fence from the API server instead: it never acts on a record older than
// its own write. Only this controller's writes are remembered, in its fenceMemory (memory.go);
// a new leader reads the cache, and before it resumes a release or fence step it did not begin
// it checks its copy against the API server's (resumable).

// errCopyReplaced says that the record in hand was replaced by the API server's copy: the
// reconcile starts again from the top with it (it may be Released, Recovered or being deleted
// by now).
var errCopyReplaced = errors.New("the NodeFence in hand was replaced by the API server's copy")

// resumable reads the fence from the API server before a release or fence step this controller
// did not begin is resumed, and says whether nf is that record. When it is not, the API server's copy
// replaces nf and err is errCopyReplaced; a fence deleted or made anew under its name is looked
// at again in a second; a failed read is an error.
func (r *NodeFenceReconciler) resumable(ctx context.Context, nf *v1alpha1.NodeFence) (res ctrl.Result, current bool, err error) {
	fresh := &v1alpha1.NodeFence{}
	if err := r.reader().Get(ctx, client.ObjectKeyFromObject(nf), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: time.Second}, false, nil
		}
		return ctrl.Result{}, false, fmt.Errorf("reading NodeFence %s before resuming step %s: %w", nf.Name, lastStep(nf).Name, err)
	}
	switch {
	case fresh.UID != nf.UID:
		return ctrl.Result{RequeueAfter: time.Second}, false, nil
	case fresh.ResourceVersion != nf.ResourceVersion:
		*nf = *fresh
		r.memory.settle(fresh)
		return ctrl.Result{}, false, errCopyReplaced
	}
	return ctrl.Result{}, true, nil
}

// latest replaces a cached fence that is behind this controller's own last write with the
// API server's copy. When that read fails, nothing is taken from the stale copy and the
// reconcile is tried again: a release step it would resume (a taint, force deletions) acts
// before its write is refused, on a record that may since say the node showed life, or that
// may be gone (NotFound, which the caller takes as a reason to look again, not an error).
func (r *NodeFenceReconciler) latest(ctx context.Context, nf *v1alpha1.NodeFence) error {
	if r.APIReader == nil || !r.memory.behind(nf) {
		return nil
	}
	fresh := &v1alpha1.NodeFence{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(nf), fresh); err != nil {
		return fmt.Errorf("reading NodeFence %s past a cache behind this controller's own last write: %w", nf.Name, err)
	}
	*nf = *fresh
	// Someone wrote after this controller (the node's agent answering an order, a person): the
	// cache catches up with that as with any write of theirs, and nothing is remembered.
	r.memory.settle(fresh)
	return nil
}
