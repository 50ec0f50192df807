package simnode_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/simnode"
)

// fakePower is a PowerSource switched by the test.
type fakePower struct{ off atomic.Bool }

func (p *fakePower) PoweredOn() (bool, error) { return !p.off.Load(), nil }

var _ simnode.PowerSource = (*fakePower)(nil)

const (
	renew   = time.Second
	timeout = 20 * time.Second
)

func TestNode(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{})
	t.Run("power cut halts the node, power back reboots it", func(t *testing.T) { testPower(t, c.Kube) })
	t.Run("partition stops heartbeats and deletions, resume catches up", func(t *testing.T) { testPartition(t, c.Kube) })
	t.Run("external lease: the Lease and Ready are left to another process", func(t *testing.T) { testExternalLease(t, c.Kube) })
}

func testPower(t *testing.T, kube kubernetes.Interface) {
	ctx := t.Context()
	power := &fakePower{}
	n := startNode(t, kube, simnode.Options{Name: "power", Power: power, PowerPollInterval: 50 * time.Millisecond})
	firstBoot := n.BootID()
	eventually(t, "node Ready with its boot ID", func() error { return nodeReady(ctx, kube, n.Name(), firstBoot) })
	before := leaseRenewTime(t, kube, n.Name())
	eventually(t, "lease renewed", func() error { return renewedAfter(ctx, kube, n.Name(), before) })
	createPod(t, kube, "before-cut", n.Name())
	eventually(t, "pod before-cut Running", func() error { return podRunning(ctx, kube, "before-cut", 0) })

	power.off.Store(true)
	cut := settledRenewTime(t, kube, n.Name())
	createPod(t, kube, "after-cut", n.Name())
	time.Sleep(3 * renew)
	if got := leaseRenewTime(t, kube, n.Name()); !got.Equal(cut) {
		t.Errorf("lease renewed while the power was off: renewTime %s, was %s", got, cut)
	}
	if err := podRunning(ctx, kube, "after-cut", 0); err == nil {
		t.Errorf("pod after-cut became Running on a node without power")
	}

	power.off.Store(false)
	eventually(t, "node Ready with a new boot ID", func() error {
		if n.BootID() == firstBoot {
			return fmt.Errorf("boot ID unchanged")
		}
		return nodeReady(ctx, kube, n.Name(), n.BootID())
	})
	eventually(t, "lease renewed after power-on", func() error { return renewedAfter(ctx, kube, n.Name(), cut) })
	eventually(t, "pod after-cut Running", func() error { return podRunning(ctx, kube, "after-cut", 0) })
	eventually(t, "pod before-cut restarted by the reboot", func() error { return podRunning(ctx, kube, "before-cut", 1) })
}

func testPartition(t *testing.T, kube kubernetes.Interface) {
	ctx := t.Context()
	n := startNode(t, kube, simnode.Options{Name: "partition"})
	createPod(t, kube, "partitioned", n.Name())
	eventually(t, "pod partitioned Running", func() error { return podRunning(ctx, kube, "partitioned", 0) })

	n.PauseHeartbeats()
	paused := settledRenewTime(t, kube, n.Name())
	if err := kube.CoreV1().Pods("default").Delete(ctx, "partitioned", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod: %v", err)
	}
	time.Sleep(3 * renew)
	if got := leaseRenewTime(t, kube, n.Name()); !got.Equal(paused) {
		t.Errorf("lease renewed during the partition: renewTime %s, was %s", got, paused)
	}
	if _, err := kube.CoreV1().Pods("default").Get(ctx, "partitioned", metav1.GetOptions{}); err != nil {
		t.Errorf("pod deletion confirmed during the partition: %v", err)
	}

	bootID := n.BootID()
	n.ResumeHeartbeats()
	eventually(t, "lease renewed after the partition", func() error { return renewedAfter(ctx, kube, n.Name(), paused) })
	eventually(t, "pod deletion confirmed", func() error {
		_, err := kube.CoreV1().Pods("default").Get(ctx, "partitioned", metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("pod still exists")
		}
		return nil
	})
	if n.BootID() != bootID {
		t.Errorf("boot ID changed across a partition")
	}
}

func startNode(t *testing.T, kube kubernetes.Interface, opts simnode.Options) *simnode.Node {
	t.Helper()
	opts.LeaseRenewInterval = renew
	opts.Logf = t.Logf
	n, err := simnode.Start(t.Context(), kube, opts)
	if err != nil {
		t.Fatalf("starting node: %v", err)
	}
	t.Cleanup(n.Stop)
	lease, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting lease: %v", err)
	}
	if got := lease.Spec.HolderIdentity; got == nil || *got != n.Name() {
		t.Errorf("lease holder %v, want %s", got, n.Name())
	}
	if refs := lease.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != n.Name() || refs[0].UID == "" {
		t.Errorf("lease owner references %+v, want the Node", refs)
	}
	return n
}

func createPod(t *testing.T, kube kubernetes.Interface, name, node string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := kube.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

func nodeReady(ctx context.Context, kube kubernetes.Interface, name, bootID string) error {
	node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if node.Status.NodeInfo.BootID != bootID {
		return fmt.Errorf("node reports boot ID %q, want %q", node.Status.NodeInfo.BootID, bootID)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("node not Ready: %+v", node.Status.Conditions)
}

func leaseRenewTime(t *testing.T, kube kubernetes.Interface, name string) time.Time {
	t.Helper()
	lease, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil || lease.Spec.RenewTime == nil {
		t.Fatalf("getting lease renew time: %v", err)
	}
	return lease.Spec.RenewTime.Time
}

// settledRenewTime is the Lease's renew time once it has stayed the same for 1.5 renewal
// intervals: a renewal already in flight when the node was cut may land after the cut, later
// on a loaded machine than any fixed wait (300 ms was once too short). A node that renews on
// never settles, and the test fails.
func settledRenewTime(t *testing.T, kube kubernetes.Interface, name string) time.Time {
	t.Helper()
	var last time.Time
	eventually(t, "lease renewals stopped", func() error {
		was := leaseRenewTime(t, kube, name)
		time.Sleep(3 * renew / 2)
		if last = leaseRenewTime(t, kube, name); !last.Equal(was) {
			return fmt.Errorf("renewed at %s after %s", last, was)
		}
		return nil
	})
	return last
}

func renewedAfter(ctx context.Context, kube kubernetes.Interface, name string, after time.Time) error {
	lease, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.After(after) {
		return fmt.Errorf("renewTime %v not after %s", lease.Spec.RenewTime, after)
	}
	return nil
}

// podRunning checks that the pod is Running and Ready with the given restart count.
func podRunning(ctx context.Context, kube kubernetes.Interface, name string, restarts int32) error {
	pod, err := kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || len(pod.Status.ContainerStatuses) != 1 {
		return fmt.Errorf("pod %s phase %q, IP %q", name, pod.Status.Phase, pod.Status.PodIP)
	}
	if cs := pod.Status.ContainerStatuses[0]; !cs.Ready || cs.State.Running == nil || cs.RestartCount != restarts {
		return fmt.Errorf("pod %s container status %+v, want running, ready, %d restarts", name, cs, restarts)
	}
	return nil
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
