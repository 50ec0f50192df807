package fencing

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers/fake"
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

// A cache behind this controller's own last write, and the API server's copy unreadable (a
// 429, a timeout): the reconcile takes nothing from the stale copy. A release step it would
// resume acts (a taint, force deletions) before its write is refused, on a record that may
// since say the node showed life. It fails, to be tried again, and writes nothing.
func TestStaleCopyUnreadPastTakesNoStep(t *testing.T) {
	w := newWorld(t, "ipmi")
	var written []*v1alpha1.NodeFence
	writes, lag := 0, false
	var stale *v1alpha1.NodeFence
	count := func() { writes++ }
	w.r.Client = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if nf, ok := obj.(*v1alpha1.NodeFence); ok && lag {
				stale.DeepCopyInto(nf)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			count()
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			if nf, ok := obj.(*v1alpha1.NodeFence); ok && err == nil {
				written = append(written, nf.DeepCopy())
			}
			return err
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			count()
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, obj, patch, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			count()
			return c.Delete(ctx, obj, opts...)
		},
	})
	unreadable := errors.New("the server is currently unable to handle the request")
	w.r.APIReader = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.NodeFence); ok && lag {
				return apierrors.NewServiceUnavailable(unreadable.Error())
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	ctx := context.Background()
	req := ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}
	// Up to the release: the copy written when the Taint step was recorded Started is the stale
	// one the cache will show once the fence has gone on past it.
	for range 60 {
		if _, err := w.r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		for _, nf := range written {
			if s := lastStep(nf); stale == nil && s != nil && s.Name == v1alpha1.StepTaint && s.State == v1alpha1.StepStarted {
				stale = nf
			}
		}
		if stale != nil && len(written) > 0 && written[len(written)-1].ResourceVersion != stale.ResourceVersion {
			break
		}
		w.now = w.now.Add(time.Second)
	}
	if stale == nil || written[len(written)-1].ResourceVersion == stale.ResourceVersion {
		t.Fatal("no record with the Taint step started and a later one: the test did not test")
	}
	lag, writes = true, 0
	_, err := w.r.Reconcile(ctx, req)
	if err == nil || !apierrors.IsServiceUnavailable(err) {
		t.Errorf("reconcile on a stale copy it could not read past: err = %v, want the read's error", err)
	}
	if writes != 0 {
		t.Errorf("%d writes from a stale copy (Taint started, the record since gone on), want none", writes)
	}
}

// A new leader does not resume a release step from a copy of the record it did not write: its
// cache may be behind the old leader's last writes. The old leader took DeletePods (the pod's
// mark refused, so the step stays Started), then recorded that the node showed life, failing
// the step and the fence. The new leader's cache still shows DeletePods Started: it checks
// the record on the API server first, plans again from it, and deletes nothing. Before, it
// force-deleted the pod of a node that was alive, and only its record of the step was refused.
func TestNewLeaderResumesNoReleaseStepOfAStaleCopy(t *testing.T) {
	w := newWorld(t, "ipmi")
	ctx := context.Background()
	nf := leaderDiesInDeletePods(t, w)
	stale := nf.DeepCopy()
	// The old leader's last write: the node showed life, the release stops.
	s := lastStep(nf)
	s.State, s.Reason, s.Message, s.Method = v1alpha1.StepFailed, v1alpha1.ReasonNodeAliveAfterFence, "node n1 renewed its Lease", nf.Status.Method
	nf.Status.Phase = v1alpha1.PhaseFailed
	if err := w.c.Status().Update(ctx, nf); err != nil {
		t.Fatal(err)
	}

	newLeader := leaderWithCacheAt(w, stale)
	if _, err := newLeader.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
		t.Errorf("the new leader's reconcile of a stale copy: %v; want it to plan again from the API server's record", err)
	}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil || nf.Status.Phase != v1alpha1.PhaseFailed || lastStep(nf).Name != v1alpha1.StepDeletePods {
		t.Errorf("the record after the new leader's reconcile (%v): phase %s, last step %s; want it as the old leader left it", err, nf.Status.Phase, lastStep(nf).Name)
	}
	pod := &corev1.Pod{}
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: "db", Name: "db-0"}, pod); err != nil || pod.Status.Phase != corev1.PodRunning {
		t.Errorf("pod db-0 of the node that showed life: %v, phase %s; want it left Running", err, pod.Status.Phase)
	}
}

// leaderDiesInDeletePods runs w's reconciler, the pods' marks refused, until its record shows
// DeletePods Started and taken, and returns that record: the old leader died there.
func leaderDiesInDeletePods(t *testing.T, w *world) *v1alpha1.NodeFence {
	t.Helper()
	ctx := context.Background()
	r := &NodeFenceReconciler{APIReader: w.c, Fencers: w.r.Fencers, Attachments: w.r.Attachments, Now: w.r.Now, Tokens: w.r.Tokens}
	r.Client = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				return errors.New("the API server is away")
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	nf := &v1alpha1.NodeFence{}
	for range 60 {
		_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
		if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
			t.Fatal(err)
		}
		if s := lastStep(nf); s.Name == v1alpha1.StepDeletePods && s.Attempts > 0 {
			break
		}
		w.now = w.now.Add(time.Second)
	}
	if s := lastStep(nf); s.Name != v1alpha1.StepDeletePods || s.State != v1alpha1.StepStarted {
		t.Fatalf("the old leader's record ends in %s %s, want DeletePods Started", s.Name, s.State)
	}
	return nf
}

// A new leader whose copy is the record resumes the release step after one read of the API
// server's copy, and finishes the release.
func TestNewLeaderResumesAReleaseStepOfACurrentCopy(t *testing.T) {
	w := newWorld(t, "ipmi")
	leaderDiesInDeletePods(t, w)
	reads := 0
	newLeader := &NodeFenceReconciler{Client: w.c, Fencers: w.r.Fencers, Attachments: w.r.Attachments, Now: w.r.Now, Tokens: w.r.Tokens}
	newLeader.APIReader = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.NodeFence); ok {
				reads++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	w.r = newLeader
	nf := w.run(t)
	if nf.Status.Phase != v1alpha1.PhaseReleased || nf.Status.PodsDeleted != 1 {
		t.Errorf("phase %s, %d pods deleted; want Released, 1", nf.Status.Phase, nf.Status.PodsDeleted)
	}
	if reads != 1 {
		t.Errorf("%d reads of the NodeFence from the API server, want 1 (before the resumed step)", reads)
	}
}

// A new leader that finds its copy behind the API server's takes the fence from the top with
// the API server's copy: one the old leader released goes on to its recovery (not left
// waiting for the Node's next change), and one being deleted is finished, not released
// further.
func TestNewLeaderTakesTheRecordFromTheTop(t *testing.T) {
	for _, tt := range []struct {
		name string
		then func(t *testing.T, w *world) // what the old leader's record became
		want func(t *testing.T, w *world, nf *v1alpha1.NodeFence, err error)
	}{
		{"released", func(t *testing.T, w *world) {
			if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
				t.Fatalf("the old leader's fence ended %s, want Released", nf.Status.Phase)
			}
		}, func(t *testing.T, w *world, nf *v1alpha1.NodeFence, err error) {
			if err != nil || nf.Status.Phase != v1alpha1.PhaseReleased || meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered) == nil {
				t.Errorf("after the new leader's reconcile (%v): phase %s, Recovered condition %v; want Released, its recovery judged",
					err, nf.Status.Phase, meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered))
			}
		}},
		{"being deleted", func(t *testing.T, w *world) {
			nf := &v1alpha1.NodeFence{}
			if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
				t.Fatal(err)
			}
			nf.Finalizers = append(nf.Finalizers, "example.com/hold")
			if err := w.c.Update(context.Background(), nf); err != nil {
				t.Fatal(err)
			}
			if err := w.c.Delete(context.Background(), nf); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, w *world, nf *v1alpha1.NodeFence, err error) {
			pod := &corev1.Pod{}
			if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "db", Name: "db-0"}, pod); err != nil || pod.Status.Phase != corev1.PodRunning {
				t.Errorf("pod db-0 of a fence being deleted: %v, phase %s; want no release step taken", err, pod.Status.Phase)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, "ipmi")
			stale := leaderDiesInDeletePods(t, w).DeepCopy()
			tt.then(t, w)
			_, err := leaderWithCacheAt(w, stale).Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
			nf := &v1alpha1.NodeFence{}
			if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
			tt.want(t, w, nf, err)
		})
	}
}

// leaderWithCacheAt is a new leader of w whose cache shows the fence as stale, whatever the API
// server holds.
func leaderWithCacheAt(w *world, stale *v1alpha1.NodeFence) *NodeFenceReconciler {
	r := &NodeFenceReconciler{APIReader: w.c, Fencers: w.r.Fencers, Attachments: w.r.Attachments, Now: w.r.Now, Tokens: w.r.Tokens}
	r.Client = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if nf, ok := obj.(*v1alpha1.NodeFence); ok {
				stale.DeepCopyInto(nf)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	return r
}

// A new leader does not resume a fence step from a copy of the record it did not write either:
// the old leader's PowerOff, refused once by the BMC, went on to a release, and the machine was
// powered on again; a cache still showing PowerOff Started would power the running machine off.
func TestNewLeaderResumesNoFenceStepOfAStaleCopy(t *testing.T) {
	w := newWorld(t, "ipmi")
	ctx := context.Background()
	w.power.InjectError(fake.MethodFence, errors.New("the BMC is busy"))
	w.ticks = 1
	nf, _ := w.advance(t)
	if s := lastStep(nf); s.Name != v1alpha1.StepPowerOff || s.State != v1alpha1.StepStarted || s.Attempts == 0 {
		t.Fatalf("the old leader's record ends in %s %s (%d attempts), want PowerOff Started and taken\n%s", s.Name, s.State, s.Attempts, goldenTrace(nf))
	}
	stale := nf.DeepCopy()
	w.ticks = 0
	if nf = w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("the old leader's fence ended %s, want Released", nf.Status.Phase)
	}
	w.power.SetFenced("n1", false) // powered on again
	offs := w.power.CallCount(fake.MethodFence, "n1")
	_, _ = leaderWithCacheAt(w, stale).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
	if got := w.power.CallCount(fake.MethodFence, "n1"); got != offs {
		t.Errorf("the new leader sent %d power-offs from a stale copy (PowerOff Started) of a fence since released, want none", got-offs)
	}
}
