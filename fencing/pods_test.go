package fencing

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

func TestPodNeeds(t *testing.T) {
	now := metav1.Now()
	deleting := func(phase corev1.PodPhase, grace *int64) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now, DeletionGracePeriodSeconds: grace, Finalizers: []string{"example.com/hold"}},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	type needs struct{ Mark, Delete, Done bool }
	tests := []struct {
		name string
		pod  *corev1.Pod
		want needs
	}{
		{"running, not deleted", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, needs{Mark: true, Delete: true}},
		{"pending, not deleted", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, needs{Mark: true, Delete: true}},
		{"marked, not deleted", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, needs{Delete: true}},
		{"terminating gracefully (taint eviction), not marked", deleting(corev1.PodRunning, ptr.To[int64](30)), needs{Mark: true, Delete: true}},
		{"marked, terminating with a longer grace period", deleting(corev1.PodFailed, ptr.To[int64](30)), needs{Delete: true}},
		{"force-deleted by someone else, not marked", deleting(corev1.PodRunning, ptr.To[int64](0)), needs{Mark: true}},
		{"marked and force-deleted, kept by a finalizer", deleting(corev1.PodFailed, ptr.To[int64](0)), needs{Done: true}},
		{"succeeded and force-deleted, kept by a finalizer", deleting(corev1.PodSucceeded, ptr.To[int64](0)), needs{Done: true}},
		{"deletion without a recorded grace period", deleting(corev1.PodFailed, nil), needs{Delete: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mark, del := podNeeds(tc.pod)
			got := needs{Mark: mark, Delete: del, Done: podDone(tc.pod)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("podNeeds (-want +got):\n%s", diff)
			}
		})
	}
}

// A pod kept by a foreign finalizer does not hold the step, and is counted once however often
// the step runs. The fake client's Delete records the grace period as the API server does.
func TestDeletePodsFinalizerHeldPod(t *testing.T) {
	tolerant := nodePod("agent-0")
	tolerant.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	c, r, nf := podScene(t, interceptor.Funcs{Delete: deleteWithGrace}, nodePod("db-0"), nodePod("held-0", "example.com/hold"), tolerant)
	var outs []outcome
	for range 3 {
		outs = append(outs, r.deletePods(context.Background(), nf))
	}
	want := outcome{state: v1alpha1.StepSucceeded,
		message: "2 pods force-deleted; 1 pod marked Failed and deleted, kept only by finalizers: db/held-0 (example.com/hold)"}
	if diff := cmp.Diff(want, outs[0], cmp.AllowUnexported(outcome{})); diff != "" {
		t.Errorf("first outcome (-want +got):\n%s", diff)
	}
	if nf.Status.PodsDeleted != 2 {
		t.Errorf("podsDeleted = %d after three runs, want 2", nf.Status.PodsDeleted)
	}
	held := &corev1.Pod{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "db", Name: "held-0"}, held); err != nil {
		t.Fatal(err)
	}
	if held.Status.Phase != corev1.PodFailed || len(held.Status.Conditions) != 1 || held.Status.Conditions[0].Reason != ReasonDisruption {
		t.Errorf("held pod status %+v, want Failed with DisruptionTarget %s", held.Status, ReasonDisruption)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(tolerant), &corev1.Pod{}); err != nil {
		t.Errorf("the pod tolerating the taint was deleted: %v", err)
	}
}

// A pod whose owner deletes it as soon as Palisade marks it Failed (the StatefulSet controller
// deletes a Failed pod at once, and the API server removes a terminal pod without a grace
// period) was released by the fence: it is counted, once, though Palisade's own deletion finds
// it gone. A pod that vanished before Palisade touched it is not.
func TestDeletePodsOwnerDeletesMarkedPod(t *testing.T) {
	var ownerDeleted atomic.Int32
	c, r, nf := podScene(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			// The owner of the db pods wins the race to the Failed pod.
			if p, ok := obj.(*corev1.Pod); ok && strings.HasPrefix(p.Name, "db-") && p.Status.Phase == corev1.PodFailed {
				ownerDeleted.Add(1)
				return c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}})
			}
			return nil
		},
		Delete: deleteWithGrace,
	}, nodePod("db-0"), nodePod("db-1"), nodePod("web-0"))
	var outs []outcome
	for range 3 {
		outs = append(outs, r.deletePods(context.Background(), nf))
	}
	if ownerDeleted.Load() != 2 {
		t.Fatalf("the owner deleted %d marked pods, want 2 (db-0, db-1)", ownerDeleted.Load())
	}
	want := outcome{state: v1alpha1.StepSucceeded, message: "3 pods force-deleted"}
	if diff := cmp.Diff(want, outs[0], cmp.AllowUnexported(outcome{})); diff != "" {
		t.Errorf("first outcome (-want +got):\n%s", diff)
	}
	if nf.Status.PodsDeleted != 3 {
		t.Errorf("podsDeleted = %d after three passes, want 3: each pod once, whoever deleted it after the mark", nf.Status.PodsDeleted)
	}
	var left corev1.PodList
	if err := c.List(context.Background(), &left); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Errorf("%d pods left after the step succeeded", len(left.Items))
	}

	// A pod gone before the fence's pass reached it was not released by the fence.
	if d, err := r.forceDelete(context.Background(), nf, nodePod("gone-0")); err != nil || d {
		t.Errorf("forceDelete of a pod already gone = %v, %v; want not counted, no error", d, err)
	}
}

// A pod replaced under the fence's hand (deleted by someone else after the fence listed it, and
// made again under its name on a healthy node by its StatefulSet) is not marked Failed: the
// mark carries the listed pod's resourceVersion. Were it marked, the kubelet of the healthy
// node would kill the new replica. A pod whose own status changed since the listing is marked
// after a fresh read.
func TestMarkFailedOnlyThePodListed(t *testing.T) {
	ctx := context.Background()
	replaced := false
	c, r, nf := podScene(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			p := obj.(*corev1.Pod)
			switch {
			case p.Name == "db-0" && !replaced:
				replaced = true
				if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "db-0"}}); err != nil {
					return err
				}
				again := nodePod("db-0")
				again.UID, again.Spec.NodeName = "uid-db-0-again", "n2"
				if err := c.Create(ctx, again); err != nil {
					return err
				}
			case p.Name == "db-1" && p.Labels["touched"] == "":
				// Another writer changes the pod first: the mark's resourceVersion is stale.
				cur := &corev1.Pod{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
					return err
				}
				cur.Labels = map[string]string{"touched": "yes"}
				if err := c.Update(ctx, cur); err != nil {
					return err
				}
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		Delete: deleteWithGrace,
	}, nodePod("db-0"), nodePod("db-1"))
	out := r.deletePods(ctx, nf)
	if out.state != v1alpha1.StepSucceeded {
		t.Fatalf("deletePods = %+v", out)
	}
	again := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "db", Name: "db-0"}, again); err != nil {
		t.Fatalf("the new db-0 on n2 is gone: %v", err)
	}
	if again.Status.Phase != corev1.PodRunning || len(again.Status.Conditions) != 0 {
		t.Errorf("the new db-0 on healthy node n2 was marked: phase %s, conditions %+v", again.Status.Phase, again.Status.Conditions)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "db", Name: "db-1"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("db-1 (changed by another writer since the listing) was not force-deleted: %v", err)
	}
	if nf.Status.PodsDeleted != 1 {
		t.Errorf("podsDeleted = %d, want 1 (db-1; db-0 was released by someone else)", nf.Status.PodsDeleted)
	}
}

// podScene is a fake API holding the pods, with their status subresource and the
// spec.nodeName index, behind funcs; and a reconciler and fence for node n1 over it.
func podScene(t *testing.T, funcs interceptor.Funcs, pods ...client.Object) (client.WithWatch, *NodeFenceReconciler, *v1alpha1.NodeFence) {
	c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(pods...).
		WithStatusSubresource(&corev1.Pod{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(funcs).
		Build()
	r := &NodeFenceReconciler{Client: c, APIReader: c, Now: func() time.Time { return time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC) }}
	nf := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}, Status: v1alpha1.NodeFenceStatus{Method: "ipmi"}}
	return c, r, nf
}

// nodePod is a Running pod in namespace db on node n1.
func nodePod(name string, finalizers ...string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name, UID: k8stypes.UID("uid-" + name), Finalizers: finalizers},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// deleteWithGrace deletes like the API server: an object kept by finalizers records the
// deletion's grace period (the fake client records only the timestamp).
func deleteWithGrace(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.Delete(ctx, obj, opts...); err != nil {
		return err
	}
	o := &client.DeleteOptions{}
	o.ApplyOptions(opts)
	p := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), p); err != nil {
		return client.IgnoreNotFound(err)
	}
	p.DeletionGracePeriodSeconds = o.GracePeriodSeconds
	return c.Update(ctx, p)
}

func TestHeldBy(t *testing.T) {
	held := func(n int) []corev1.Pod {
		var out []corev1.Pod
		for i := range n {
			out = append(out, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: fmt.Sprintf("db-%d", i),
				Finalizers: []string{"example.com/hold", "example.com/backup"}}})
		}
		return out
	}
	tests := []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{"one", held(1), "db/db-0 (example.com/hold, example.com/backup)"},
		{"three", held(3), "db/db-0 (example.com/hold, example.com/backup), db/db-1 (example.com/hold, example.com/backup), db/db-2 (example.com/hold, example.com/backup)"},
		{"five, three named", held(5), "db/db-0 (example.com/hold, example.com/backup), db/db-1 (example.com/hold, example.com/backup), db/db-2 (example.com/hold, example.com/backup) and 2 more"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, heldBy(tc.pods)); diff != "" {
				t.Errorf("heldBy (-want +got):\n%s", diff)
			}
		})
	}
}

// A node's pods are marked and deleted PodWriters at a time, never more; a pod whose deletion
// fails keeps the step pending with the error, the others are counted once, and the next pass
// finishes the job and counts the rest.
func TestDeletePodsInParallel(t *testing.T) {
	const pods = 50
	var objs []client.Object
	for i := range pods {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: fmt.Sprintf("p-%02d", i), UID: k8stypes.UID(fmt.Sprintf("uid-%d", i))},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	var (
		inFlight, most atomic.Int32
		failing        atomic.Bool
	)
	failing.Store(true)
	c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithStatusSubresource(&corev1.Pod{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(5 * time.Millisecond) // a round trip to the API server
			if failing.Load() && strings.HasSuffix(obj.GetName(), "7") {
				return fmt.Errorf("injected: etcd timeout")
			}
			return deleteWithGrace(ctx, c, obj, opts...)
		}}).
		Build()
	r := &NodeFenceReconciler{Client: c, APIReader: c, Now: func() time.Time { return time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC) }}
	nf := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}, Status: v1alpha1.NodeFenceStatus{Method: "ipmi"}}

	out := r.deletePods(context.Background(), nf)
	if out.state != v1alpha1.StepStarted || out.reason != ReasonAPIError || !strings.Contains(out.message, "injected: etcd timeout") {
		t.Errorf("first pass with failing deletions: %+v, want pending with the API error", out)
	}
	if got := nf.Status.PodsDeleted; got != pods-5 { // p-07, p-17, p-27, p-37, p-47 failed
		t.Errorf("podsDeleted after the first pass = %d, want %d", got, pods-5)
	}
	if m := most.Load(); m < 2 || m > PodWriters {
		t.Errorf("at most %d deletions at once, want between 2 and %d", m, PodWriters)
	}
	failing.Store(false)
	out = r.deletePods(context.Background(), nf)
	if out.state != v1alpha1.StepSucceeded || nf.Status.PodsDeleted != pods {
		t.Errorf("second pass: %+v with podsDeleted %d, want done with %d", out, nf.Status.PodsDeleted, pods)
	}
	var left corev1.PodList
	if err := c.List(context.Background(), &left); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Errorf("%d pods left after the step succeeded", len(left.Items))
	}
}

// A pod that ended while Palisade marked it (its mark's resourceVersion stale: the pod
// Succeeded by itself, or PodGC marked it Failed with its own DisruptionTarget) keeps its end as
// written: Palisade reads it again, does not overwrite its phase or conditions, and only
// deletes it.
func TestMarkKeepsAnEndWrittenMeanwhile(t *testing.T) {
	for _, end := range []corev1.PodStatus{
		{Phase: corev1.PodSucceeded},
		{Phase: corev1.PodFailed, Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC"}}},
	} {
		ended := false
		c, r, nf := podScene(t, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if !ended {
					ended = true
					cur := &corev1.Pod{}
					if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
						return err
					}
					cur.Status = end
					if err := c.Status().Update(ctx, cur); err != nil {
						return err
					}
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
			Delete: deleteWithGrace,
		}, nodePod("db-0", "example.com/hold"))
		if out := r.deletePods(context.Background(), nf); out.state != v1alpha1.StepSucceeded {
			t.Fatalf("%s: deletePods = %+v", end.Phase, out)
		}
		got := &corev1.Pod{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "db", Name: "db-0"}, got); err != nil {
			t.Fatal(err)
		}
		kept := len(got.Status.Conditions) == len(end.Conditions)
		for i := range end.Conditions {
			kept = kept && got.Status.Conditions[i].Reason == end.Conditions[i].Reason
		}
		if got.Status.Phase != end.Phase || !kept || got.DeletionTimestamp == nil {
			t.Errorf("pod ended %s meanwhile: now %s, conditions %+v, deleted %t; want its end kept and the pod deleted",
				end.Phase, got.Status.Phase, got.Status.Conditions, got.DeletionTimestamp != nil)
		}
	}
}
