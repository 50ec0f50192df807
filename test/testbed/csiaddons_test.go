package testbed_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	csiaddonsv1alpha1 "github.com/csi-addons/kubernetes-csi-addons/api/csiaddons/v1alpha1"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/csiaddonsdriver"
)

// TestCSIAddonsNetworkFence drives the real csi-addons chain: a NetworkFence of the test
// bed's NetworkFenceClass goes through the real manager and the real sidecar to the stand-in
// driver, which fences and unfences the CIDR; the manager reports the outcome in the
// NetworkFence's status and removes its finalizer on deletion. When the storage refuses, the
// NetworkFence reports Failed and nothing is fenced, until the storage answers again.
func TestCSIAddonsNetworkFence(t *testing.T) {
	began := time.Now()
	c := testbed.StartT(t, testbed.Options{CSIAddons: true, NoCSIAttacher: true})
	t.Logf("Start took %s", time.Since(began).Round(time.Millisecond))

	t.Run("fence, unfence, delete", func(t *testing.T) {
		const cidr = "10.9.8.7/32"
		nf := createNetworkFence(t, c, "fence-node-a", cidr)
		waitNetworkFence(t, c, nf.Name, csiaddonsv1alpha1.FencingOperationResultSucceeded, csiaddonsv1alpha1.FenceOperationSuccessfulMessage)
		if !slices.Contains(c.CSIAddons.Fenced(), cidr) {
			t.Fatalf("driver fenced %v; want %s among them", c.CSIAddons.Fenced(), cidr)
		}
		last := c.CSIAddons.Calls()[len(c.CSIAddons.Calls())-1]
		want := csiaddonsdriver.Call{
			Method: csiaddonsdriver.MethodFence, CIDRs: []string{cidr},
			Parameters: map[string]string{"clusterID": "palisade-testbed"}, SecretKeys: []string{"userID", "userKey"},
		}
		if diff := cmp.Diff(want, last); diff != "" {
			t.Errorf("driver's last call (-want +got):\n%s", diff)
		}

		setFenceState(t, c, nf.Name, csiaddonsv1alpha1.Unfenced)
		waitNetworkFence(t, c, nf.Name, csiaddonsv1alpha1.FencingOperationResultSucceeded, csiaddonsv1alpha1.UnFenceOperationSuccessfulMessage)
		if c.CSIAddons.IsFenced(cidr) {
			t.Fatalf("driver still fences %s after Unfenced", cidr)
		}

		deleteNetworkFence(t, c, nf.Name)
	})

	t.Run("storage refuses", func(t *testing.T) {
		const cidr = "10.9.8.6/32"
		before := c.CSIAddons.Fenced()
		c.CSIAddons.Refuse(status.Error(codes.Unavailable, "storage unreachable"))
		t.Cleanup(func() { c.CSIAddons.Refuse(nil) })
		nf := createNetworkFence(t, c, "fence-node-b", cidr)
		got := waitNetworkFence(t, c, nf.Name, csiaddonsv1alpha1.FencingOperationResultFailed, "")
		if !strings.Contains(got.Status.Message, "storage unreachable") {
			t.Errorf("status.message %q; want the driver's error", got.Status.Message)
		}
		if diff := cmp.Diff(before, c.CSIAddons.Fenced()); diff != "" {
			t.Errorf("driver's fenced CIDRs changed while refusing (-before +after):\n%s", diff)
		}

		// The manager retries a failed request: once the storage answers, the CIDR is fenced.
		c.CSIAddons.Refuse(nil)
		waitNetworkFence(t, c, nf.Name, csiaddonsv1alpha1.FencingOperationResultSucceeded, csiaddonsv1alpha1.FenceOperationSuccessfulMessage)
		if !c.CSIAddons.IsFenced(cidr) {
			t.Errorf("driver fenced %v after the retry; want %s among them", c.CSIAddons.Fenced(), cidr)
		}
		deleteNetworkFence(t, c, nf.Name)
	})
}

func createNetworkFence(t *testing.T, c *testbed.Cluster, name, cidr string) *csiaddonsv1alpha1.NetworkFence {
	t.Helper()
	nf := &csiaddonsv1alpha1.NetworkFence{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: csiaddonsv1alpha1.NetworkFenceSpec{
			NetworkFenceClassName: testbed.NetworkFenceClassName,
			FenceState:            csiaddonsv1alpha1.Fenced,
			Cidrs:                 []string{cidr},
		},
	}
	if err := c.Client.Create(t.Context(), nf); err != nil {
		t.Fatalf("creating NetworkFence %s: %v", name, err)
	}
	return nf
}

func setFenceState(t *testing.T, c *testbed.Cluster, name string, state csiaddonsv1alpha1.FenceState) {
	t.Helper()
	var nf csiaddonsv1alpha1.NetworkFence
	if err := c.Client.Get(t.Context(), client.ObjectKey{Name: name}, &nf); err != nil {
		t.Fatalf("getting NetworkFence %s: %v", name, err)
	}
	patch := client.MergeFrom(nf.DeepCopy())
	nf.Spec.FenceState = state
	if err := c.Client.Patch(t.Context(), &nf, patch); err != nil {
		t.Fatalf("setting NetworkFence %s to %s: %v", name, state, err)
	}
}

// waitNetworkFence waits until the NetworkFence reports result and, unless empty, message
// for its current generation's request.
func waitNetworkFence(t *testing.T, c *testbed.Cluster, name string, result csiaddonsv1alpha1.FencingOperationResult, message string) *csiaddonsv1alpha1.NetworkFence {
	t.Helper()
	began := time.Now()
	var nf csiaddonsv1alpha1.NetworkFence
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, &nf); err != nil {
			return false, err
		}
		return nf.Status.Result == result && (message == "" || nf.Status.Message == message), nil
	})
	if err != nil {
		t.Fatalf("waiting for NetworkFence %s to report %s %q: %v (status %+v)", name, result, message, err, nf.Status)
	}
	t.Logf("NetworkFence %s: %s %q after %s", name, nf.Status.Result, nf.Status.Message, time.Since(began).Round(time.Millisecond))
	return &nf
}

func deleteNetworkFence(t *testing.T, c *testbed.Cluster, name string) {
	t.Helper()
	nf := &csiaddonsv1alpha1.NetworkFence{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Client.Delete(t.Context(), nf); err != nil {
		t.Fatalf("deleting NetworkFence %s: %v", name, err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKey{Name: name}, nf)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("waiting for NetworkFence %s to be gone (finalizers %v): %v", name, nf.Finalizers, err)
	}
}
