package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// `kubectl delete node` of a node cut off from the control plane (its machine and its pods
// still running): the deletion is a fence request. The node is powered off and confirmed
// before any of its pods is force-deleted — by Palisade or by PodGC, which force-deletes the
// pods of a deleted node — and the Node goes once the fence holds. The lease timeout is long so
// that the deletion, not the detectors, is what fences the node.
func TestDeletingACutOffNodeFencesItFirst(t *testing.T) {
	env := startScene(t, scenario.Options{LeaseTimeout: 10 * time.Minute})
	startController(t, env)
	w := deploy(t, env)
	n1 := env.Node(1)
	ctx := context.Background()
	waitNode(t, env, n1.Name(), "to carry the finalizer", func(n *corev1.Node) bool {
		return slices.Contains(n.Finalizers, v1alpha1.FinalizerFenceOnDelete)
	})
	tr, err := env.Track(ctx, n1, w.Pod, func(m scenario.Milestone, d time.Duration) { t.Logf("+%5.1fs %s", d.Seconds(), m) })
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	n1.PauseHeartbeats() // cut off: no Lease renewal reaches the API server; the machine runs on
	if err := env.Cluster.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Wait(ctx, scenario.PodDeleted, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, first := tr.ConfirmedBeforeRelease(); !ok {
		t.Fatalf("the first release (%s) was not preceded by a confirmed fence with the power Off", first)
	}
	if _, err := tr.Wait(ctx, scenario.ReplacementRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	nf := waitFence(t, env.Cluster, n1.Name(), time.Minute, phaseIs(v1alpha1.PhaseReleased))
	if nf.Spec.Trigger != v1alpha1.TriggerNodeDeleted {
		t.Errorf("trigger %s, want %s", nf.Spec.Trigger, v1alpha1.TriggerNodeDeleted)
	}
	if on, err := n1.BMC.PoweredOn(); err != nil || on {
		t.Errorf("node 1's power on = %t (%v), want Off", on, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: n1.Name()}, &corev1.Node{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Errorf("the Node was not deleted after its fence: %v", err)
	}
	if !hasEvent(eventsFor(t, env, "Node", n1.Name()), "NodeDeletionReleased") {
		t.Errorf("no NodeDeletionReleased event on node %s", n1.Name())
	}
}

// waitNode waits until the node satisfies ok.
func waitNode(t *testing.T, env *scenario.Env, name, what string, ok func(*corev1.Node) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n := &corev1.Node{}
		if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return ok(n), nil
	})
	if err != nil {
		t.Fatalf("waiting for node %s %s: %v", name, what, err)
	}
}
