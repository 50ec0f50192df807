package testbed_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/simnode"
)

const (
	csiVolume = "pv-csi"
	csiHandle = "vol-csi"
	csiClaim  = "data-csi"
)

// TestPodWaitsForCSIAttach: a pod with an RWO CSI volume, bound to node-a while the disk is
// still published to node-b, is refused by the driver through the real external-attacher
// (FailedPrecondition, the VolumeAttachment's attachError) and stays not Running; once the
// disk is released from node-b, the attacher marks the attachment attached and only then the
// simulated kubelet runs the pod.
func TestPodWaitsForCSIAttach(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{})
	ctx := t.Context()
	for _, name := range []string{"node-a", "node-b"} {
		n, err := simnode.Start(ctx, c.Kube, simnode.Options{Name: name, LeaseRenewInterval: 2 * time.Second, Logf: t.Logf})
		if err != nil {
			t.Fatalf("starting %s: %v", name, err)
		}
		t.Cleanup(n.Stop)
	}
	assertCSINode(t, c, "node-a")
	ctl := controllerClient(t, c)
	rwo := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	// The disk is still held by node-b, as after a failure nobody cleaned up.
	if _, err := ctl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId: csiHandle, NodeId: "node-b", VolumeCapability: rwo}); err != nil {
		t.Fatalf("publishing to node-b: %v", err)
	}
	createCSIWorkload(t, c, "node-a")

	va := waitAttachment(t, c, "node-a", "an attach error", func(va *storagev1.VolumeAttachment) bool {
		return va.Status.AttachError != nil
	})
	if va.Status.Attached || !strings.Contains(va.Status.AttachError.Message, "FailedPrecondition") {
		t.Errorf("attachment to node-a: attached %t, error %q; want refused with FailedPrecondition", va.Status.Attached, va.Status.AttachError.Message)
	}
	time.Sleep(time.Second) // give the simulated kubelet every chance to run it anyway
	if p := getPod(t, c, "csi-app"); p.Status.Phase == corev1.PodRunning {
		t.Fatal("pod Running while its volume is not attached")
	}
	if n, _ := c.CSI.Published(csiHandle); n != "node-b" {
		t.Fatalf("volume published to %q, want still node-b", n)
	}

	released := time.Now()
	if _, err := ctl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: csiHandle, NodeId: "node-b"}); err != nil {
		t.Fatalf("unpublishing from node-b: %v", err)
	}
	waitForRunningPod(t, c, "app=csi-app")
	t.Logf("pod Running %s after the disk was released from node-b", time.Since(released).Round(time.Millisecond))
	va = waitAttachment(t, c, "node-a", "attached", func(va *storagev1.VolumeAttachment) bool { return va.Status.Attached })
	if n, _ := c.CSI.Published(csiHandle); n != "node-a" {
		t.Errorf("volume published to %q, want node-a", n)
	}
	if va.Status.AttachError != nil {
		t.Errorf("attach error left on an attached volume: %v", va.Status.AttachError)
	}
}

func controllerClient(t *testing.T, c *testbed.Cluster) csi.ControllerClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+c.CSI.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return csi.NewControllerClient(conn)
}

// assertCSINode checks that the node registered the test bed's driver in its CSINode.
func assertCSINode(t *testing.T, c *testbed.Cluster, node string) {
	t.Helper()
	cn, err := c.Kube.StorageV1().CSINodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting CSINode %s: %v", node, err)
	}
	if d := cn.Spec.Drivers; len(d) != 1 || d[0].Name != testbed.CSIDriverName || d[0].NodeID != node {
		t.Errorf("CSINode %s drivers %+v, want %s with node ID %s", node, d, testbed.CSIDriverName, node)
	}
}

// createCSIWorkload creates an RWO CSI volume, its claim and a pod using it bound to node.
func createCSIWorkload(t *testing.T, c *testbed.Cluster, node string) {
	t.Helper()
	ctx := t.Context()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: csiVolume},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef:         &corev1.ObjectReference{Namespace: "default", Name: csiClaim},
			StorageClassName: "",
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: testbed.CSIDriverName, VolumeHandle: csiHandle}},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: csiClaim, Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: new(string), VolumeName: csiVolume,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-app", Namespace: "default", Labels: map[string]string{"app": "csi-app"}},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: csiClaim}}}},
		},
	}
	for _, obj := range []client.Object{pv, pvc, pod} {
		if err := c.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
}

// waitAttachment waits for the VolumeAttachment of csiVolume to node to satisfy ok.
func waitAttachment(t *testing.T, c *testbed.Cluster, node, what string, ok func(*storagev1.VolumeAttachment) bool) *storagev1.VolumeAttachment {
	t.Helper()
	var found *storagev1.VolumeAttachment
	last := "none"
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Kube.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			va := &list.Items[i]
			if src := va.Spec.Source.PersistentVolumeName; va.Spec.NodeName == node && src != nil && *src == csiVolume {
				found, last = va, fmt.Sprintf("%s attached=%t error=%v", va.Name, va.Status.Attached, va.Status.AttachError)
				return ok(va), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for the attachment of %s to %s to be %s: %v (last seen: %s)", csiVolume, node, what, err, last)
	}
	return found
}

func getPod(t *testing.T, c *testbed.Cluster, name string) *corev1.Pod {
	t.Helper()
	p, err := c.Kube.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting pod %s: %v", name, err)
	}
	return p
}
