package fencing

import (
	"context"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"palisade.dev/palisade/detectors/lease"
)

// Lease events. Every kubelet renews its Lease every 10s: at 5000 nodes, 500 events a second.
// Each is recorded at once as seen (lease.Renewals: when the controller first saw a renewal is
// what the classifier orders against an agent's last heartbeat, and where the verify window
// counts from), but a renewal only wakes its node when it may change the node's verdict.
//
// Why a renewal of a node judged Healthy changes nothing: a renewal makes the Lease fresh, and a
// fresh Lease is Healthy; seen now, it is after any heartbeat the agent missed, so it cannot
// make the node Dead either (classify: a renewal seen after the agent's next heartbeat was due
// keeps the Lease's verdict). What it changes is only when the node would turn failed if
// nothing else came: later. The reconcile that judged the node Healthy asked to look again at
// that moment, and that look reads the renewal from the cache and moves the moment on. So a
// node judged Healthy by its last reconcile is not woken by a plain renewal (only renewTime
// changed); every other Lease event wakes its node, and so does every renewal of a node judged
// anything else, or not judged (a fence on record, a manual request, no policy).

// healthyNodes are the nodes whose latest reconcile judged them Healthy and asked to look again
// when that would end.
type healthyNodes struct{ m sync.Map }

func (h *healthyNodes) set(node string, healthy bool) {
	if healthy {
		h.m.Store(node, struct{}{})
		return
	}
	h.m.Delete(node)
}

func (h *healthyNodes) has(node string) bool {
	_, ok := h.m.Load(node)
	return ok
}

// leaseEvents records every renewal as seen and wakes the Lease's node unless the event is a
// plain renewal of a node judged Healthy.
func (r *NodeReconciler) leaseEvents() handler.EventHandler {
	enqueue := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKey{Name: o.GetName()}})
	}
	wake := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if o.GetNamespace() == lease.Namespace {
			enqueue(o, q)
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if r.sawLease(e.Object) {
				enqueue(e.Object, q)
			}
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if !r.sawLease(e.ObjectNew) {
				return
			}
			if plainRenewal(e.ObjectOld, e.ObjectNew) && r.healthy.has(e.ObjectNew.GetName()) {
				return
			}
			enqueue(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			wake(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			wake(e.Object, q)
		},
	}
}

// sawLease records the renewal a node Lease carries as seen now; false for another object.
func (r *NodeReconciler) sawLease(o client.Object) bool {
	l, ok := o.(*coordinationv1.Lease)
	if !ok || l.Namespace != lease.Namespace {
		return false
	}
	if l.Spec.RenewTime != nil {
		r.Observer.Renewals.Seen(l.Name, l.Spec.RenewTime.Time, r.now())
	}
	return true
}

// plainRenewal says whether new differs from old only by a later renewTime (and the
// bookkeeping of metadata): the same holder, duration and transitions.
func plainRenewal(oldObj, newObj client.Object) bool {
	o, ok1 := oldObj.(*coordinationv1.Lease)
	n, ok2 := newObj.(*coordinationv1.Lease)
	if !ok1 || !ok2 || o.Spec.RenewTime == nil || n.Spec.RenewTime == nil || !n.Spec.RenewTime.After(o.Spec.RenewTime.Time) {
		return false
	}
	os, ns := o.Spec, n.Spec
	os.RenewTime, ns.RenewTime = nil, nil
	return apiequality.Semantic.DeepEqual(os, ns) && n.DeletionTimestamp.IsZero()
}
