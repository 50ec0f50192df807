package networkfence_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	csiaddonsv1alpha1 "github.com/csi-addons/kubernetes-csi-addons/api/csiaddons/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/networkfence"
	"palisade.dev/palisade/test/testbed"
)

// The tests run against the real csi-addons manager and sidecar, in front of the test bed's
// stand-in CSI-Addons driver, which records the CIDRs it fences.

func startCluster(t *testing.T) *testbed.Cluster {
	t.Helper()
	return testbed.StartT(t, testbed.Options{CSIAddons: true, NoCSIAttacher: true})
}

// addNode creates a Node with the addresses and annotations given.
func addNode(t *testing.T, c *testbed.Cluster, name string, annotations map[string]string, addrs ...corev1.NodeAddress) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	if err := c.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	// kube-controller-manager may write the new Node meanwhile: take its latest copy.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		node.Status.Addresses = addrs
		return c.Client.Status().Update(ctx, node)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func request(node, uid, class string, token int64) providers.Request {
	return providers.Request{
		Fence: &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: node, UID: types.UID(uid)},
			Spec: v1alpha1.NodeFenceSpec{NodeName: node}, Status: v1alpha1.NodeFenceStatus{Token: token}},
		Method: v1alpha1.Method{Name: "storage", Type: v1alpha1.MethodNetworkFence,
			NetworkFence: &v1alpha1.NetworkFenceMethod{NetworkFenceClassName: class}},
		Now: time.Now(),
	}
}

// until calls f every 100ms until it answers want, and fails the test after d.
func until(t *testing.T, d time.Duration, what string, want providers.State, f func() (providers.Status, error)) providers.Status {
	t.Helper()
	var st providers.Status
	var err error
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if st, err = f(); err == nil && st.State == want {
			return st
		}
	}
	t.Fatalf("%s: no %s within %s; last %+v, %v", what, want, d, st, err)
	return st
}

// TestFenceConfirmedByTheStorage: the fence asks the storage to refuse the node's addresses,
// is confirmed only once the csi-addons manager reports the fence Succeeded (the driver then
// holds the CIDRs), carries the fencing token, and is lifted, read back and cleaned up by
// Unfence.
func TestFenceConfirmedByTheStorage(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	addNode(t, c, "db-1", nil, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.2.3"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "fd00::3"}, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "db-1"})
	p := networkfence.New(c.Client, c.Client)
	req := request("db-1", "a1b2c3d4-0000-4000-8000-000000000001", testbed.NetworkFenceClassName, 17)
	wantCIDRs := []string{"10.1.2.3/32", "fd00::3/128"}

	st, err := p.Fence(ctx, req)
	if err != nil || st.State != providers.InProgress {
		t.Fatalf("Fence = %+v, %v; want InProgress (a command is never a confirmation)", st, err)
	}
	if !strings.Contains(st.Message, "10.1.2.3/32, fd00::3/128") || !strings.Contains(st.Message, testbed.CSIAddonsDriverName) {
		t.Errorf("Fence message %q does not name the CIDRs and the driver", st.Message)
	}
	st = until(t, 30*time.Second, "fence", providers.Confirmed, func() (providers.Status, error) { return p.Check(ctx, req) })
	for _, cidr := range wantCIDRs {
		if !c.CSIAddons.IsFenced(cidr) {
			t.Errorf("confirmed (%s) but the driver does not fence %s: %v", st.Message, cidr, c.CSIAddons.Fenced())
		}
	}
	calls := c.CSIAddons.Calls()
	if len(calls) == 0 || calls[0].Parameters[networkfence.ParameterToken] != "17" {
		t.Errorf("the driver's fence call did not carry the fencing token parameter %s: %+v", networkfence.ParameterToken, calls)
	}
	// Fence again (a retry, a new leader): the same object, no second fence.
	if st, err := p.Fence(ctx, req); err != nil || st.State != providers.InProgress {
		t.Errorf("Fence again = %+v, %v", st, err)
	}
	list := &csiaddonsv1alpha1.NetworkFenceList{}
	if err := c.Client.List(ctx, list); err != nil || len(list.Items) != 1 {
		t.Fatalf("NetworkFences after two Fence calls: %d, %v; want 1", len(list.Items), err)
	}
	if nf := list.Items[0]; nf.Labels[v1alpha1.LabelNode] != "db-1" || len(nf.OwnerReferences) != 0 {
		t.Errorf("NetworkFence %s: labels %v, owners %v; want the node label and no owner (the garbage collector must never drop a fence)", nf.Name, nf.Labels, nf.OwnerReferences)
	}

	until(t, 30*time.Second, "unfence", providers.Confirmed, func() (providers.Status, error) { return p.Unfence(ctx, req) })
	if got := c.CSIAddons.Fenced(); len(got) != 0 {
		t.Errorf("lifted, but the driver still fences %v", got)
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: networkfence.ObjectName(req)}, &csiaddonsv1alpha1.NetworkFence{}); !apierrors.IsNotFound(err) {
		t.Errorf("NetworkFence after the lift: %v, want gone", err)
	}
	if st, err := p.Unfence(ctx, req); err != nil || st.State != providers.Confirmed {
		t.Errorf("Unfence of a lifted fence = %+v, %v; want Confirmed", st, err)
	}
}

// TestStorageRefusalIsNotAFence: a storage that refuses leaves the fence unconfirmed, the step
// says why, and at the method's timeout the method fails; the driver fences nothing. Someone
// deleting the confirmed fence's NetworkFence makes it fail too.
func TestStorageRefusalIsNotAFence(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	addNode(t, c, "db-2", map[string]string{v1alpha1.AnnotationStorageCIDRs: "192.168.50.7/32"},
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.2.4"})
	p := networkfence.New(c.Client, c.Client)
	req := request("db-2", "a1b2c3d4-0000-4000-8000-000000000002", testbed.NetworkFenceClassName, 18)

	c.CSIAddons.Refuse(errors.New("array controller offline"))
	if _, err := p.Fence(ctx, req); err != nil {
		t.Fatal(err)
	}
	var st providers.Status
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end) && st.Reason != providers.ReasonStorageRefused; time.Sleep(100 * time.Millisecond) {
		var err error
		if st, err = p.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
		if st.State == providers.Confirmed {
			t.Fatalf("a fence the storage refused was confirmed: %+v", st)
		}
	}
	if st.State != providers.InProgress || st.Reason != providers.ReasonStorageRefused || !strings.Contains(st.Message, "array controller offline") {
		t.Fatalf("Check of a refused fence = %+v; want InProgress, %s, with the storage's words", st, providers.ReasonStorageRefused)
	}
	expired := req
	expired.Expired = true
	if st, err := p.Check(ctx, expired); err != nil || st.State != providers.Failed || st.Reason != providers.ReasonStorageRefused {
		t.Errorf("Check at the timeout = %+v, %v; want Failed %s", st, err, providers.ReasonStorageRefused)
	}
	if got := c.CSIAddons.Fenced(); len(got) != 0 {
		t.Errorf("the refusing driver fences %v", got)
	}

	// The storage comes back: the manager tries again and the fence of the annotation's CIDR holds.
	c.CSIAddons.Refuse(nil)
	until(t, 60*time.Second, "fence after the storage came back", providers.Confirmed, func() (providers.Status, error) { return p.Check(ctx, req) })
	if got := c.CSIAddons.Fenced(); !slices.Equal(got, []string{"192.168.50.7/32"}) {
		t.Errorf("the driver fences %v, want the annotation's 192.168.50.7/32 only", got)
	}
	if err := c.Client.Delete(ctx, &csiaddonsv1alpha1.NetworkFence{ObjectMeta: metav1.ObjectMeta{Name: networkfence.ObjectName(req)}}); err != nil {
		t.Fatal(err)
	}
	st = until(t, 20*time.Second, "fence whose object was deleted", providers.Failed, func() (providers.Status, error) { return p.Check(ctx, req) })
	if st.Reason != providers.ReasonStorageFenceRemoved {
		t.Errorf("Check after the NetworkFence was deleted = %+v, want %s", st, providers.ReasonStorageFenceRemoved)
	}
}

// TestBadTargetsChangeNothing: a missing class, a node without addresses, a malformed
// annotation, a missing node: each is a Failed BadTarget that says what to fix, and no
// NetworkFence is created.
func TestBadTargetsChangeNothing(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	addNode(t, c, "no-addr", nil, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "no-addr"})
	addNode(t, c, "bad-anno", map[string]string{v1alpha1.AnnotationStorageCIDRs: "10.9.9.9/24"}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.9.9.9"})
	addNode(t, c, "fine", nil, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.9.9.10"})
	p := networkfence.New(c.Client, c.Client)
	for _, tc := range []struct {
		node, class, says string
	}{
		{"fine", "no-such-class", "NetworkFenceClass no-such-class (method storage) does not exist"},
		{"fine", "", "method storage has no networkFence.networkFenceClassName"},
		{"no-addr", testbed.NetworkFenceClassName, "node no-addr has no InternalIP or ExternalIP address"},
		{"bad-anno", testbed.NetworkFenceClassName, "did you mean 10.9.9.0/24, or 10.9.9.9/32?"},
		{"gone", testbed.NetworkFenceClassName, "node gone does not exist"},
	} {
		st, err := p.Fence(ctx, request(tc.node, "a1b2c3d4-0000-4000-8000-00000000000f", tc.class, 1))
		if err != nil || st.State != providers.Failed || st.Reason != providers.ReasonBadTarget || !strings.Contains(st.Message, tc.says) {
			t.Errorf("Fence(%s, class %q) = %+v, %v; want Failed BadTarget saying %q", tc.node, tc.class, st, err, tc.says)
		}
	}
	list := &csiaddonsv1alpha1.NetworkFenceList{}
	if err := c.Client.List(ctx, list); err != nil || len(list.Items) != 0 {
		t.Errorf("NetworkFences after bad targets: %d, %v; want none", len(list.Items), err)
	}
	if got := c.CSIAddons.Calls(); len(got) != 0 {
		t.Errorf("the driver was called for bad targets: %+v", got)
	}
}
