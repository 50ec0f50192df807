package simnode_test

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/test/testbed/simnode"
)

// With ExternalLease the node registers itself at its InternalIP and runs pods, but neither
// creates nor renews the Lease nor sets Ready back to True; a reboot still reports itself.
func testExternalLease(t *testing.T, kube kubernetes.Interface) {
	ctx := t.Context()
	const ip = "10.231.0.10"
	power := &fakePower{}
	n, err := simnode.Start(ctx, kube, simnode.Options{
		Name: "external", ExternalLease: true, InternalIP: ip, LeaseRenewInterval: renew,
		Power: power, PowerPollInterval: 50 * time.Millisecond, Logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("starting node: %v", err)
	}
	t.Cleanup(n.Stop)
	firstBoot := n.BootID()
	eventually(t, "node Ready with its boot ID", func() error { return nodeReady(ctx, kube, n.Name(), firstBoot) })
	node, err := kube.CoreV1().Nodes().Get(ctx, n.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := internalIP(node); got != ip {
		t.Errorf("node InternalIP %q, want %q", got, ip)
	}
	createPod(t, kube, "external-pod", n.Name())
	eventually(t, "pod Running", func() error { return podRunning(ctx, kube, "external-pod", 0) })
	if pod, err := kube.CoreV1().Pods("default").Get(ctx, "external-pod", metav1.GetOptions{}); err != nil || pod.Status.HostIP != ip {
		t.Errorf("pod host IP: %v, %v; want %s", pod.Status.HostIP, err, ip)
	}

	time.Sleep(2 * renew)
	if _, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.Name(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the node made its Lease itself (get: %v)", err)
	}
	// The other process's Lease and the node lifecycle controller's Unknown stay as they are.
	external := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name(), Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.Name()), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: time.Now().Add(-time.Minute).Truncate(time.Microsecond)}},
	}
	if _, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, external, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	markReadyUnknown(t, kube, n.Name())
	time.Sleep(3 * renew)
	if got := leaseRenewTime(t, kube, n.Name()); !got.Equal(external.Spec.RenewTime.Time) {
		t.Errorf("the node renewed the external Lease: renewTime %s, was %s", got, external.Spec.RenewTime.Time)
	}
	if err := nodeReady(ctx, kube, n.Name(), firstBoot); err == nil {
		t.Error("the node set Ready back to True although the external process owns it")
	}

	power.off.Store(true)
	time.Sleep(300 * time.Millisecond)
	power.off.Store(false)
	eventually(t, "node Ready again with a new boot ID after a power cycle", func() error {
		if n.BootID() == firstBoot {
			return fmt.Errorf("boot ID unchanged")
		}
		return nodeReady(ctx, kube, n.Name(), n.BootID())
	})
	if got := leaseRenewTime(t, kube, n.Name()); !got.Equal(external.Spec.RenewTime.Time) {
		t.Errorf("the boot renewed the external Lease: renewTime %s", got)
	}
}

func internalIP(node *corev1.Node) string {
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// markReadyUnknown does what the node lifecycle controller does to a node that went silent.
func markReadyUnknown(t *testing.T, kube kubernetes.Interface, name string) {
	t.Helper()
	node, err := kube.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range node.Status.Conditions {
		if c := &node.Status.Conditions[i]; c.Type == corev1.NodeReady {
			c.Status, c.Reason, c.LastTransitionTime = corev1.ConditionUnknown, "NodeStatusUnknown", metav1.Now()
		}
	}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(t.Context(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking node %s Ready=Unknown: %v", name, err)
	}
}
