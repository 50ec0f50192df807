package fencing

import (
	"context"
	"fmt"

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
// a new leader reads the cache.

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
