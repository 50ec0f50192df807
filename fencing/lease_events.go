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
	"palisade.dev/palisade/detectors/sight"
)

// Lease events. Every kubelet renews its Lease every 10s: at 5000 nodes, 500 events a second.
// Each is recorded at once as seen (lease.Renewals: when the controller first saw a renewal is
// what the classifier orders against an agent's last heartbeat, and where the verify window
// counts from), but a renewal only wakes its node when it may change what the controller does.
//
// Why a plain renewal of a node judged neither failed nor fenced changes nothing to act on: a
// renewal makes the Lease fresh, and a fresh Lease is Healthy; seen now, it is after any
// heartbeat the agent missed, so it cannot make the node Dead either (classify: a renewal seen
// after the agent's next heartbeat was due keeps the Lease's verdict). A renewal never turns a
// node failed; it only turns a late (Suspect) node Healthy, which is not failed either, and
// moves later the moment the node would turn failed if nothing else came. The reconcile that
// judged the node not failed asked to look again at that moment (lookAgain), and that look
// reads the renewal from the cache and moves the moment on. So a node whose latest reconcile
// judged it not failed is not woken by a plain renewal (only renewTime changed); every other
// Lease event wakes its node, and so does every renewal of a node judged failed, or not judged
// (a fence on record, a manual request, no policy).

// lookPending are the nodes whose latest reconcile judged them not failed and asked to look
// again at their Deadline.
type lookPending struct{ m sync.Map }

func (p *lookPending) set(node string, pending bool) {
	if pending {
		p.m.Store(node, struct{}{})
		return
	}
	p.m.Delete(node)
}

func (p *lookPending) has(node string) bool {
	_, ok := p.m.Load(node)
	return ok
}

// leaseEvents records every renewal as seen and wakes the Lease's node unless the event is a
// plain renewal of a node with a look pending.
func (r *NodeReconciler) leaseEvents() handler.EventHandler {
	enqueue := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKey{Name: o.GetName()}})
	}
	wake := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if isNodeLease(o) {
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
			if plainRenewal(e.ObjectOld, e.ObjectNew) && r.looks.has(e.ObjectNew.GetName()) {
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

// isNodeLease says whether o is a node's Lease: in lease.Namespace, and not the controller's own
// sight canary there (detectors/sight), which names no node and is renewed every second.
func isNodeLease(o client.Object) bool {
	return o.GetNamespace() == lease.Namespace && o.GetName() != sight.CanaryName
}

// sawLease records the renewal a node Lease carries as seen now; false for another object.
func (r *NodeReconciler) sawLease(o client.Object) bool {
	l, ok := o.(*coordinationv1.Lease)
	if !ok || !isNodeLease(l) {
		return false
	}
	if l.Spec.RenewTime != nil {
		r.Observer.SawLease(l, r.now())
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
