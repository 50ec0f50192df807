package simkubelettest_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/testbed/simkubelet/simkubelettest"
	"palisade.dev/palisade/test/testbed/simnode"
)

func TestMain(m *testing.M) {
	code := m.Run()
	simkubelettest.Cleanup()
	os.Exit(code)
}

const (
	renew   = time.Second
	timeout = 20 * time.Second
)

// The stand-in, in a node namespace, renews its Lease through the relay and keeps Ready True;
// cut off from the relay it stops renewing while its healthz and port still answer; healed,
// it renews again; killed, it answers nothing.
func TestLeaseFollowsTheNetwork(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, Controllers: []string{"node-lifecycle-controller"}})
	bin := simkubelettest.Build(t) // before the clocks start
	lan := netns.New(t)
	nsNode, peer := lan.AddNode("node-1"), lan.AddNode("peer")
	relay := lan.Relay(t, hostPort(t, c.Config.Host))
	sim, err := simnode.Start(t.Context(), c.Kube, simnode.Options{
		Name: nsNode.Name(), ExternalLease: true, InternalIP: nsNode.IP(), LeaseRenewInterval: renew, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Stop)
	p := simkubelettest.Start(t, nsNode, simkubelettest.Options{
		Binary: bin, Kubeconfig: simkubelettest.WriteKubeconfig(t, c.Config, relay), NodeName: nsNode.Name(), RenewInterval: renew,
	})
	kube, name := c.Kube, nsNode.Name()

	first := eventuallyRenewed(t, kube, name, time.Time{}, "first renewal")
	checkLease(t, kube, name)
	eventuallyRenewed(t, kube, name, first, "renewals")
	mustProbe(t, peer, nsNode.IP()+":10250", "the kubelet port from a peer")

	markReadyUnknown(t, kube, name)
	eventually(t, "Ready set back to True", func() error { return readyTrue(t.Context(), kube, name) })

	must(t, nsNode.Cut(endpoint(t, relay)))
	time.Sleep(renew + 500*time.Millisecond) // a renewal in flight may still land
	cutAt := renewTime(t, kube, name)
	time.Sleep(3 * renew)
	if got := renewTime(t, kube, name); !got.Equal(cutAt) {
		t.Errorf("lease renewed while cut off from the API server: renewTime %s, was %s", got, cutAt)
	}
	if err := p.Healthz(t.Context()); err != nil {
		t.Errorf("healthz while cut off from the API server: %v", err)
	}
	mustProbe(t, peer, nsNode.IP()+":10250", "the kubelet port from a peer while cut off from the API server")

	healed := time.Now()
	must(t, nsNode.Heal())
	eventuallyRenewed(t, kube, name, cutAt, "renewal after Heal")
	t.Logf("renewals resumed %s after Heal", time.Since(healed).Round(time.Millisecond))

	must(t, p.Kill())
	if err := p.Healthz(t.Context()); err == nil {
		t.Error("healthz answers after SIGKILL")
	}
	logged := p.Log()
	for what, want := range map[string]int{`"msg":"renewing lease failed"`: 1, `"msg":"renewing lease recovered"`: 1, `"msg":"node Ready"`: 1} {
		if got := strings.Count(logged, what); got != want {
			t.Errorf("log has %d lines with %s, want %d:\n%s", got, what, want, logged)
		}
	}
}

// SIGTERM stops it cleanly (exit status 0).
func TestStopsOnSIGTERM(t *testing.T) {
	lan := netns.New(t)
	n := lan.AddNode("node-1")
	// No API server is needed to start: renewals fail, healthz answers.
	kubeconfig := writeUnreachableKubeconfig(t, lan.HostIP())
	p := simkubelettest.Start(t, n, simkubelettest.Options{Kubeconfig: kubeconfig, NodeName: "node-1", RenewInterval: renew})
	if err := p.Stop(); err != nil {
		t.Errorf("stopping with SIGTERM: %v\n%s", err, p.Log())
	}
	if !strings.Contains(p.Log(), `"msg":"stopping"`) {
		t.Errorf("no stopping message in the log:\n%s", p.Log())
	}
}

func writeUnreachableKubeconfig(t *testing.T, host string) string {
	t.Helper()
	path := t.TempDir() + "/kubeconfig"
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, host)
	must(t, os.WriteFile(path, []byte(kc), 0o600))
	return path
}

func hostPort(t *testing.T, host string) string {
	t.Helper()
	u, err := url.Parse(host)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func endpoint(t *testing.T, addr string) netns.Endpoint {
	t.Helper()
	e, err := netns.ParseEndpoint(addr)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mustProbe connects from n to addr, as a peer probing the kubelet port does.
func mustProbe(t *testing.T, n *netns.Node, addr, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	c, err := n.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	c.Close()
}

func checkLease(t *testing.T, kube kubernetes.Interface, name string) {
	t.Helper()
	lease, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != name {
		t.Errorf("lease holder %v, want %s", h, name)
	}
	// Four renewal intervals, as the kubelet's: the controller reads the interval from it.
	if d := lease.Spec.LeaseDurationSeconds; d == nil || *d != int32(4*renew/time.Second) {
		t.Errorf("lease duration %v, want %d (renewed every %s)", d, 4*renew/time.Second, renew)
	}
	if refs := lease.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != name || refs[0].UID == "" {
		t.Errorf("lease owner references %+v, want the Node", refs)
	}
}

func renewTime(t *testing.T, kube kubernetes.Interface, name string) time.Time {
	t.Helper()
	lease, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil || lease.Spec.RenewTime == nil {
		t.Fatalf("reading lease renew time: %v", err)
	}
	return lease.Spec.RenewTime.Time
}

// eventuallyRenewed waits until the Lease exists with a renewTime after after, and returns it.
func eventuallyRenewed(t *testing.T, kube kubernetes.Interface, name string, after time.Time, what string) time.Time {
	t.Helper()
	var got time.Time
	eventually(t, what, func() error {
		lease, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.After(after) {
			return fmt.Errorf("renewTime %v not after %s", lease.Spec.RenewTime, after)
		}
		got = lease.Spec.RenewTime.Time
		return nil
	})
	return got
}

func readyTrue(ctx context.Context, kube kubernetes.Interface, name string) error {
	node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("node %s not Ready: %+v", name, node.Status.Conditions)
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
