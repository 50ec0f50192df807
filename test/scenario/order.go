package scenario

import (
	"context"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/testbed"
)

// orderWatch proves the order of writes: it watches the NodeFence, the Node, the pod and the
// attachments, and keeps the etcd revision (resourceVersion) at which the fence was first
// recorded as confirmed and at which the first release (taint, pod deletion, attachment
// deletion) was written. etcd orders revisions globally, so confirm < release proves the
// API server accepted the confirmation before any release.
type orderWatch struct {
	mu                  sync.Mutex
	confirmRV, firstRel uint64
	firstWhat           string
	wg                  sync.WaitGroup
}

func watchOrder(ctx context.Context, c *testbed.Cluster, node string, podUID types.UID) (*orderWatch, error) {
	wc, err := client.NewWithWatch(c.Config, client.Options{Scheme: c.Scheme})
	if err != nil {
		return nil, err
	}
	o := &orderWatch{}
	byName := client.MatchingFields{"metadata.name": node}
	lists := []struct {
		list client.ObjectList
		opts []client.ListOption
		see  func(watch.Event, uint64)
	}{
		{&v1alpha1.NodeFenceList{}, []client.ListOption{byName}, o.seeFence},
		{&corev1.NodeList{}, []client.ListOption{byName}, o.seeNode},
		{&corev1.PodList{}, []client.ListOption{client.InNamespace(Namespace)}, o.seePod(podUID)},
		{&storagev1.VolumeAttachmentList{}, nil, o.seeAttachment(node)},
	}
	for _, l := range lists {
		if err := wc.List(ctx, l.list, l.opts...); err != nil {
			return nil, err
		}
		opts := append(l.opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: l.list.(metav1.ListInterface).GetResourceVersion()}})
		w, err := wc.Watch(ctx, l.list, opts...)
		if err != nil {
			return nil, err
		}
		o.wg.Add(1)
		go o.consume(ctx, w, l.see)
	}
	return o, nil
}

func (o *orderWatch) consume(ctx context.Context, w watch.Interface, see func(watch.Event, uint64)) {
	defer o.wg.Done()
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			if obj, isObj := ev.Object.(client.Object); isObj {
				rv, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
				see(ev, rv)
			}
		}
	}
}

func (o *orderWatch) seeFence(ev watch.Event, rv uint64) {
	if nf, ok := ev.Object.(*v1alpha1.NodeFence); ok && fencing.Confirmed(nf) {
		o.mu.Lock()
		if o.confirmRV == 0 {
			o.confirmRV = rv
		}
		o.mu.Unlock()
	}
}

func (o *orderWatch) seeNode(ev watch.Event, rv uint64) {
	if n, ok := ev.Object.(*corev1.Node); ok && hasOutOfService(n) {
		o.release(rv, "out-of-service taint")
	}
}

func (o *orderWatch) seePod(uid types.UID) func(watch.Event, uint64) {
	return func(ev watch.Event, rv uint64) {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || p.UID != uid {
			return
		}
		if ev.Type == watch.Deleted || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed {
			o.release(rv, "pod "+p.Name+" failed or deleted")
		}
	}
}

func (o *orderWatch) seeAttachment(node string) func(watch.Event, uint64) {
	return func(ev watch.Event, rv uint64) {
		va, ok := ev.Object.(*storagev1.VolumeAttachment)
		if ok && va.Spec.NodeName == node && (ev.Type == watch.Deleted || va.DeletionTimestamp != nil) {
			o.release(rv, "attachment "+va.Name+" deleted")
		}
	}
}

func (o *orderWatch) release(rv uint64, what string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.firstRel == 0 || rv < o.firstRel {
		o.firstRel, o.firstWhat = rv, what
	}
}

// confirmedFirst says whether a confirmation was written before the first release, and what
// that release was.
func (o *orderWatch) confirmedFirst() (bool, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.confirmRV != 0 && o.firstRel != 0 && o.confirmRV < o.firstRel, o.firstWhat
}
