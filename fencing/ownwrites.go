package fencing

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
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
// its own write. Only this controller's writes are remembered; a new leader reads the cache.

// ownWrites holds, per NodeFence, the resourceVersion of this controller's last write.
type ownWrites struct{ m sync.Map } // fence name -> ownWrite

type ownWrite struct {
	uid types.UID
	rv  string
}

// wrote remembers nf's resourceVersion as this controller's last write of it.
func (o *ownWrites) wrote(nf *v1alpha1.NodeFence) {
	o.m.Store(nf.Name, ownWrite{uid: nf.UID, rv: nf.ResourceVersion})
}

// behind says whether cached is not this controller's last write of the fence (the cache is
// behind it, or someone wrote after it); it forgets a write the cache has caught up with.
func (o *ownWrites) behind(cached *v1alpha1.NodeFence) bool {
	v, ok := o.m.Load(cached.Name)
	if !ok {
		return false
	}
	w := v.(ownWrite)
	if w.uid != cached.UID || w.rv == cached.ResourceVersion {
		o.m.CompareAndDelete(cached.Name, w)
		return false
	}
	return true
}

// forget drops what is remembered of the fence named name (it was deleted).
func (o *ownWrites) forget(name string) { o.m.Delete(name) }

// latest replaces a cached fence that is behind this controller's own last write with the
// API server's copy. When that read fails the cached copy is used: its write is refused if it
// is stale, and the reconcile is tried again.
func (r *NodeFenceReconciler) latest(ctx context.Context, nf *v1alpha1.NodeFence) {
	if r.APIReader == nil || !r.written.behind(nf) {
		return
	}
	fresh := &v1alpha1.NodeFence{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(nf), fresh); err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("reading the NodeFence past a cache behind this controller's own write failed; using the cache", "error", err.Error())
		return
	}
	*nf = *fresh
	// Someone wrote after this controller (the node's agent answering an order, a person): the
	// cache catches up with that as with any write of theirs, and nothing is remembered.
	r.written.settle(fresh)
}

// settle forgets the fence's last write once the API server holds a later one.
func (o *ownWrites) settle(fresh *v1alpha1.NodeFence) {
	if v, ok := o.m.Load(fresh.Name); ok && v.(ownWrite).rv != fresh.ResourceVersion {
		o.m.CompareAndDelete(fresh.Name, v)
	}
}
