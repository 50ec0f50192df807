package e2e

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/test/scenario"
)

// A healthy node's Lease deleted (kubectl delete lease, a common troubleshooting step) fences
// nothing: the node is judged from the last renewal the controller saw, not from its Ready
// condition's heartbeat, which a kubelet that renews a Lease posts only every few minutes (the
// simulated kubelets every minute), and the kubelet makes its Lease again within its interval.
// Before, the deletion woke the node, its Ready heartbeat was older than the lease timeout, and
// it was fenced at once (powered off, had it a working BMC). Deleted three times, 2 s apart,
// each time while the Ready heartbeat is older than the timeout.
func TestDeletedLeaseFencesNothing(t *testing.T) {
	env := startScene(t, scenario.Options{Nodes: 3})
	startController(t, env)
	deploy(t, env) // a pet on node-1: something to fence it for
	waitBlindCondition(t, env, "False", 4*leaseTimeout)
	ctx := context.Background()
	c := env.Cluster.Client
	name := env.Node(1).Name()
	key := client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: name}
	for i := range 3 {
		// Older than the timeout a node without a Lease is judged with (two default renewal
		// intervals: no Lease, no interval to read).
		waitReadyHeartbeatOlder(t, env, name, lease.Timeout(nil, leaseTimeout)+time.Second)
		l := &coordinationv1.Lease{}
		if err := c.Get(ctx, key, l); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, l); err != nil {
			t.Fatalf("deleting the Lease of %s (%d): %v", name, i+1, err)
		}
		time.Sleep(2 * time.Second)
		notFenced(t, env, name)
		again := &coordinationv1.Lease{}
		if err := c.Get(ctx, key, again); err != nil || again.UID == l.UID {
			t.Fatalf("the Lease of %s was not made again within 2s of its deletion (%v): the test did not test", name, err)
		}
	}
	time.Sleep(2 * leaseTimeout)
	notFenced(t, env, name)
	if ev := eventsFor(t, env, "Node", name); hasEvent(ev, "StormGuard") || hasEvent(ev, "NoWorkloadToFence") {
		t.Fatalf("node %s was held for another reason, so the test did not test: %v", name, ev)
	}
}

// waitReadyHeartbeatOlder waits until node's Ready condition's heartbeat is older than age.
func waitReadyHeartbeatOlder(t *testing.T, env *scenario.Env, node string, age time.Duration) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		n := &corev1.Node{}
		if err := env.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
			t.Fatal(err)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && time.Since(c.LastHeartbeatTime.Time) > age {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the Ready heartbeat of %s never grew older than %s", node, age)
}

// notFenced fails the test when node has a NodeFence.
func notFenced(t *testing.T, env *scenario.Env, node string) {
	t.Helper()
	nf := &v1alpha1.NodeFence{}
	err := env.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: node}, nf)
	if err == nil {
		t.Fatalf("node %s, healthy, was fenced after its Lease was deleted: %s", node, trace(nf))
	}
	if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
