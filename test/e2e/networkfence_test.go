package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	csiaddonsv1alpha1 "github.com/csi-addons/kubernetes-csi-addons/api/csiaddons/v1alpha1"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed"
)

// storageFence is the NetworkFence method of the test bed's csi-addons chain.
func storageFence(level string) v1alpha1.Method {
	return v1alpha1.Method{Name: "storage", Type: v1alpha1.MethodNetworkFence, Level: level, Timeout: &metav1.Duration{Duration: 20 * time.Second},
		NetworkFence: &v1alpha1.NetworkFenceMethod{NetworkFenceClassName: testbed.NetworkFenceClassName}}
}

// nodeCIDR is the node's InternalIP as the single-address CIDR a storage fence fences.
func nodeCIDR(t *testing.T, env *scenario.Env, name string) string {
	t.Helper()
	node := &corev1.Node{}
	if err := env.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: name}, node); err != nil {
		t.Fatal(err)
	}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address + "/32"
		}
	}
	t.Fatalf("node %s has no InternalIP", name)
	return ""
}

func networkFences(t *testing.T, env *scenario.Env) []csiaddonsv1alpha1.NetworkFence {
	t.Helper()
	list := &csiaddonsv1alpha1.NetworkFenceList{}
	if err := env.Cluster.Client.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func removeOutOfServiceTaint(t *testing.T, env *scenario.Env, name string) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintOutOfService })
	if err := env.Cluster.Client.Patch(ctx, node, patch); err != nil {
		t.Fatal(err)
	}
}

// TestStorageFenceFailover: node 1 loses its power; the policy's only method is a storage fence
// through the real csi-addons manager and sidecar. The storage refuses the node's address
// before anything is released; the replacement runs elsewhere. Deleting the NodeFence lifts
// nothing while the node carries the out-of-service taint; once the repaired node's taint is
// removed, the fence is lifted at the storage and the NodeFence goes.
func TestStorageFenceFailover(t *testing.T) {
	env := startScene(t, scenario.Options{CSIAddons: true, Policy: func(p *v1alpha1.FencingPolicy) {
		p.Spec.Methods = []v1alpha1.Method{storageFence("")}
	}})
	startController(t, env)
	w := deploy(t, env)
	ctx := context.Background()
	n1 := env.Node(1)
	cidr := nodeCIDR(t, env, n1.Name())
	if err := n1.BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, fenceEnded)
	want := []string{"StorageFence:Succeeded", "ConfirmStorageFenced:Succeeded", "VerifyFenced:Succeeded", "Taint:Succeeded", "DeletePods:Succeeded", "ReleaseAttachments:Succeeded"}
	if diff := cmp.Diff(want, trace(nf)); diff != "" {
		t.Fatalf("step trace (-want +got):\n%s", diff)
	}
	if st, reason, msg := condition(nf, v1alpha1.ConditionFenced); st != "True" || reason != v1alpha1.ReasonStorageFenceConfirmed {
		t.Errorf("Fenced condition = %s/%s (%s), want True/%s", st, reason, msg, v1alpha1.ReasonStorageFenceConfirmed)
	}
	if !env.Cluster.CSIAddons.IsFenced(cidr) {
		t.Fatalf("released, but the storage does not fence %s: %v", cidr, env.Cluster.CSIAddons.Fenced())
	}
	if !strings.Contains(stepMessage(nf, "ConfirmStorageFenced"), cidr) {
		t.Errorf("the confirmation does not name the fenced CIDR %s: %q", cidr, stepMessage(nf, "ConfirmStorageFenced"))
	}
	if _, err := env.WaitPodRunning(ctx, "", n1.Name(), 30*time.Second); err != nil {
		t.Fatalf("no replacement of %s Running: %v", w.Pod.Name, err)
	}

	// The operator deletes the NodeFence while node 1 is still out of service: nothing is lifted.
	if err := env.Cluster.Client.Delete(ctx, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}}); err != nil {
		t.Fatal(err)
	}
	nf = waitFence(t, env.Cluster, n1.Name(), 20*time.Second, func(nf *v1alpha1.NodeFence) bool {
		c := meta.FindStatusCondition(nf.Status.Conditions, fencing.ConditionStorageFenceLifted)
		return c != nil && c.Reason == fencing.ReasonAwaitingNodeRepair
	})
	time.Sleep(2 * time.Second)
	if !env.Cluster.CSIAddons.IsFenced(cidr) || len(networkFences(t, env)) != 1 {
		t.Fatalf("the storage fence was lifted while node 1 carries the out-of-service taint: fenced %v", env.Cluster.CSIAddons.Fenced())
	}
	if !hasEvent(eventsFor(t, env, "NodeFence", n1.Name()), fencing.ReasonAwaitingNodeRepair) {
		t.Errorf("no %s event says what to do", fencing.ReasonAwaitingNodeRepair)
	}

	// Node 1 is repaired: its power is back, and the operator removes the taint.
	boot := n1.BootID()
	if err := n1.BMC.SetPower(true); err != nil {
		t.Fatal(err)
	}
	// Repaired means running again: lifted while its Lease is still stale, the node would be
	// found failed and fenced anew.
	waitBooted(t, env, n1, boot)
	removeOutOfServiceTaint(t, env, n1.Name())
	waitGone(t, env, n1.Name())
	if got := env.Cluster.CSIAddons.Fenced(); len(got) != 0 {
		t.Errorf("the NodeFence is gone but the storage still fences %v", got)
	}
	if got := networkFences(t, env); len(got) != 0 {
		t.Errorf("%d NetworkFences left after the lift", len(got))
	}
	if !hasEvent(eventsFor(t, env, "NodeFence", n1.Name()), fencing.ReasonStorageFenceLifted) {
		t.Errorf("no %s event", fencing.ReasonStorageFenceLifted)
	}
}

// TestStorageFenceOfALiveNodeReleasesNothing: a storage fence the storage confirms for a node
// that keeps renewing its Lease (a manual request on a live node) is disproved: nothing is
// released, the chain escalates, and the fence ends Failed.
func TestStorageFenceOfALiveNodeReleasesNothing(t *testing.T) {
	env := startScene(t, scenario.Options{CSIAddons: true, Policy: func(p *v1alpha1.FencingPolicy) {
		p.Spec.Methods = []v1alpha1.Method{storageFence(""), {Name: "self-fence", Type: v1alpha1.MethodSelfFence, Timeout: &metav1.Duration{Duration: 8 * time.Second},
			SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 3 * time.Second}}}}
	}})
	startController(t, env)
	w := deploy(t, env)
	n1 := env.Node(1)
	cidr := nodeCIDR(t, env, n1.Name())
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: storage-fence a live node"})
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, fenceEnded)
	if nf.Status.Phase != v1alpha1.PhaseFailed {
		t.Errorf("phase %s, want Failed: %v", nf.Status.Phase, trace(nf))
	}
	if !env.Cluster.CSIAddons.IsFenced(cidr) {
		t.Fatalf("the storage never fenced %s: the test did not test (%v)", cidr, trace(nf))
	}
	assertDisproved(t, nf, "storage")
	assertNothingReleased(t, env, w)

	// Nothing was released: deleting the NodeFence lifts the fence at once.
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: nil})
	if err := env.Cluster.Client.Delete(context.Background(), &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, env, n1.Name())
	if got := env.Cluster.CSIAddons.Fenced(); len(got) != 0 {
		t.Errorf("the storage still fences %v after the failed fence's NodeFence was deleted", got)
	}
}

// TestStorageAndPowerLevel: an all-of level of the storage fence and an IPMI power-off. The
// BMC refuses the password: the storage fence alone does not count, the fence fails and
// nothing is released.
func TestStorageAndPowerLevel(t *testing.T) {
	env := startScene(t, scenario.Options{CSIAddons: true, Policy: func(p *v1alpha1.FencingPolicy) {
		ipmi := p.Spec.Methods[0]
		ipmi.Level, ipmi.Timeout = "storage-and-power", &metav1.Duration{Duration: 6 * time.Second}
		p.Spec.Methods = []v1alpha1.Method{storageFence("storage-and-power"), ipmi}
	}})
	ctx := context.Background()
	wrong := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "wrong-password"},
		StringData: map[string]string{"username": "admin", "password": "not-the-password"}}
	if err := env.Cluster.Client.Create(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	startController(t, env)
	w := deploy(t, env)
	n1 := env.Node(1)
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationBMCSecret: "wrong-password"})
	n1.PauseHeartbeats()
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, fenceEnded)
	want := []string{"StorageFence:Succeeded", "ConfirmStorageFenced:Succeeded", "PowerOff:Failed"}
	if diff := cmp.Diff(want, trace(nf)); diff != "" {
		t.Errorf("step trace (-want +got):\n%s", diff)
	}
	if st, reason, msg := condition(nf, v1alpha1.ConditionFenced); st != "False" || reason != "BMCAuthFailed" || nf.Status.Phase != v1alpha1.PhaseFailed {
		t.Errorf("phase %s, Fenced condition %s/%s (%s): want Failed, False/BMCAuthFailed", nf.Status.Phase, st, reason, msg)
	}
	n1.ResumeHeartbeats()
	assertNothingReleased(t, env, w)
}
