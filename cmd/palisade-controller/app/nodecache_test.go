package app

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/testbed"
)

// kubeletNode is a Node as a kubelet, a cloud provider, a CSI driver and an operator leave it:
// what fencing reads, and images, capacity, allocatable, volumes, daemon endpoints, another
// condition, more system info and others' annotations, which it does not.
func kubeletNode(name string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "rack-1"},
			Annotations: map[string]string{"example.com/owner": "dba", "csi.volume.kubernetes.io/nodeid": `{"ebs.csi.aws.com":"i-0123"}`,
				"palisade.dev/bmc-address": "10.0.9.7"}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///eu-west-1a/i-0123456789abcdef0",
			Taints: []corev1.Taint{{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}},
	}
	n.Status = corev1.NodeStatus{
		Phase: corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Unix(1796030000, 0), LastTransitionTime: metav1.Unix(1796020000, 0)},
		},
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}, {Type: corev1.NodeHostName, Address: name}},
		NodeInfo:        corev1.NodeSystemInfo{BootID: "b0a1", SystemUUID: "ec2f0e0e-0000-0000-0000-000000000001", KubeletVersion: "v1.37.0", KernelVersion: "6.12.48"},
		Capacity:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi")},
		Allocatable:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("7800m"), corev1.ResourceMemory: resource.MustParse("31Gi")},
		Images:          []corev1.ContainerImage{{Names: []string{"registry.example/postgres@sha256:0123", "registry.example/postgres:17"}, SizeBytes: 150 << 20}},
		VolumesInUse:    []corev1.UniqueVolumeName{"kubernetes.io/csi/ebs.csi.aws.com^vol-1"},
		VolumesAttached: []corev1.AttachedVolume{{Name: "kubernetes.io/csi/ebs.csi.aws.com^vol-1", DevicePath: ""}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
	}
	return n
}

// The cache keeps of a Node what fencing reads — its labels, its palisade.dev/ annotations, its
// spec, and its status's phase, Ready condition, addresses, boot ID and system UUID — and drops
// the rest, managedFields included.
func TestTrimNodeKeepsWhatFencingReads(t *testing.T) {
	full := kubeletNode("n1")
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	got, err := trimNode(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "rack-1"},
			Annotations: map[string]string{"palisade.dev/bmc-address": "10.0.9.7"}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///eu-west-1a/i-0123456789abcdef0",
			Taints: []corev1.Taint{{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.NodeStatus{
			Phase:      corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Unix(1796030000, 0), LastTransitionTime: metav1.Unix(1796020000, 0)}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}, {Type: corev1.NodeHostName, Address: "n1"}},
			NodeInfo:   corev1.NodeSystemInfo{BootID: "b0a1", SystemUUID: "ec2f0e0e-0000-0000-0000-000000000001"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("trimmed Node (-want +got):\n%s", diff)
	}
	bare, err := trimNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare", Annotations: map[string]string{"example.com/owner": "dba"}}})
	if err != nil || bare.(*corev1.Node).Annotations != nil {
		t.Errorf("trimNode of a Node with no annotation of Palisade's: %v, %v; want no annotations", bare, err)
	}
	if other, err := trimNode(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}); err != nil || other.(*corev1.Pod).Name != "p" {
		t.Errorf("trimNode of a Pod: %v, %v; want it unchanged", other, err)
	}
}

// The manager NewManager builds caches Nodes trimmed, as read from the real API server: the
// images a kubelet posts are not held, the boot ID and the taints are.
func TestManagerCachesNodesTrimmed(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, Controllers: []string{"serviceaccount-token-controller"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	full := kubeletNode("kubelet-node")
	status := full.Status
	if err := c.Client.Create(ctx, full); err != nil {
		t.Fatal(err)
	}
	full.Status = status
	if err := c.Client.Status().Update(ctx, full); err != nil {
		t.Fatal(err)
	}
	mgr, err := NewManager(c.Config, Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	defer runManager(t, ctx, cancel, mgr)()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache not synced")
	}
	cached := &corev1.Node{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := mgr.GetCache().Get(ctx, client.ObjectKey{Name: full.Name}, cached)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cached Node: %v", err)
		}
	}
	if len(cached.Status.Images) != 0 || len(cached.Status.Capacity) != 0 || len(cached.ManagedFields) != 0 {
		t.Errorf("cached Node holds %d images, %d capacities, %d managedFields entries; want none", len(cached.Status.Images), len(cached.Status.Capacity), len(cached.ManagedFields))
	}
	if _, others := cached.Annotations["example.com/owner"]; others || len(cached.Status.Conditions) != 1 {
		t.Errorf("cached Node holds annotations %v and conditions %v; want Palisade's annotations and the Ready condition only", cached.Annotations, cached.Status.Conditions)
	}
	if cached.Status.NodeInfo.BootID != "b0a1" || !fencing.OutOfService(cached) || !lease.NodeReady(cached) || cached.Annotations["palisade.dev/bmc-address"] != "10.0.9.7" {
		t.Errorf("cached Node lost what fencing reads: bootID %q, taints %v, conditions %v, annotations %v", cached.Status.NodeInfo.BootID, cached.Spec.Taints, cached.Status.Conditions, cached.Annotations)
	}
}

// runManager starts mgr; the function returned cancels its context and waits for it to stop.
func runManager(t *testing.T, ctx context.Context, cancel context.CancelFunc, mgr ctrl.Manager) func() {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
}
