package fencing

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// A cache that shows each NodeFence one write behind the controller's own last write (a busy
// API server) neither refuses a write nor holds the fence: its reconciles read the record from
// the API server while the cache is behind.
func TestCacheBehindOwnWriteIsReadPast(t *testing.T) {
	w := newWorld(t, "ipmi")
	var lagged, last *v1alpha1.NodeFence // the cache shows lagged once a later write was made
	refused, stale := 0, 0
	w.r.Client = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if nf, ok := obj.(*v1alpha1.NodeFence); ok && lagged != nil {
				lagged.DeepCopyInto(nf)
				stale++
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			if apierrors.IsConflict(err) {
				refused++
			}
			if nf, ok := obj.(*v1alpha1.NodeFence); ok && err == nil {
				lagged, last = last, nf.DeepCopy()
			}
			return err
		},
	})
	ctx := context.Background()
	nf := &v1alpha1.NodeFence{}
	for range 60 {
		_, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
		if err != nil && !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
		if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
			t.Fatal(err)
		}
		if nf.Status.Phase == v1alpha1.PhaseReleased || nf.Status.Phase == v1alpha1.PhaseFailed {
			break
		}
		w.now = w.now.Add(time.Second)
	}
	if stale == 0 {
		t.Fatal("the cache never showed a stale record: the test did not test")
	}
	if refused != 0 || nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Errorf("%d writes refused, phase %q: want none refused and the fence Released", refused, nf.Status.Phase)
	}
	checkGolden(t, "power-off-confirmed", goldenTrace(nf))
}

// What is remembered of a fence's last write: behind while the cache shows another version,
// forgotten once the cache shows it, once the API server holds a later one, or for another fence
// made under the same name.
func TestOwnWritesRemembered(t *testing.T) {
	var o fenceMemory
	if o.behind(fenceAt("a", "4")) {
		t.Error("behind with nothing written")
	}
	o.wrote(fenceAt("a", "5"))
	if !o.behind(fenceAt("a", "4")) {
		t.Error("not behind a cache showing an older version")
	}
	if o.behind(fenceAt("b", "4")) {
		t.Error("behind for another fence under the same name")
	}
	o.wrote(fenceAt("a", "5"))
	if o.behind(fenceAt("a", "5")) || o.behind(fenceAt("a", "4")) {
		t.Error("behind after the cache caught up (the write is forgotten then)")
	}
	o.wrote(fenceAt("a", "5"))
	o.settle(fenceAt("a", "6")) // someone wrote after
	if o.behind(fenceAt("a", "4")) {
		t.Error("behind after a later write by someone else")
	}
	o.wrote(fenceAt("a", "7"))
	o.forget("n1")
	if o.behind(fenceAt("a", "6")) {
		t.Error("behind after the fence was deleted")
	}
}
