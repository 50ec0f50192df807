package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"palisade.dev/palisade/config/gatewaywire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/providers/storagegateway"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/testbed/simnode"
	"palisade.dev/palisade/test/testbed/storagehost"
)

// storageHost is a storage host (storagehost: its TCP service stands in for an iSCSI or NFS
// target) with the real palisade-agent gateway in front of its nftables.
type storageHost struct {
	*storagehost.Host
	gateway string // ip:port of the gateway
	client  *http.Client
	certs   *storagehost.Certs // the CA, and the controller's client certificate
}

func startStorageHost(t *testing.T, lan *netns.LAN) *storageHost {
	t.Helper()
	host := storagehost.Start(t, lan, "storage")
	dir := t.TempDir()
	certs := storagehost.WriteCerts(t, dir, host.IP())
	bin := buildAgent(t)
	s := &storageHost{Host: host, gateway: host.IP() + ":9446", certs: certs, client: certs.HTTPClient(t, certs.Client)}
	logFile, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := host.Node().Command(context.Background(), bin, "gateway", "--listen-address", s.gateway, "--name", "storage-1",
		"--tls-cert", certs.CertFile, "--tls-key", certs.KeyFile, "--client-ca", certs.CAFile, "--state-dir", filepath.Join(dir, "state"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("gateway log:\n%s", b)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := s.client.Get("https://" + s.gateway + gatewaywire.PathFences + "probe")
		if err == nil {
			resp.Body.Close()
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not answer at %s: %v", s.gateway, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// secret is the method's tlsSecretRef: the gateways' CA and the controller's client certificate.
func (s *storageHost) secret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "gateway-tls"},
		Data: map[string][]byte{storagegateway.KeyCA: s.certs.CA.CertPEM(), storagegateway.KeyCert: s.certs.Client.CertPEM, storagegateway.KeyKey: s.certs.Client.KeyPEM}}
}

// replay sends a fence command for node with token, as a late copy of an old order would
// arrive, and returns the gateway's status code and answer.
func (s *storageHost) replay(t *testing.T, node, addr string, token int64) (int, string) {
	t.Helper()
	body, _ := json.Marshal(gatewaywire.FenceRequest{Token: token, Addresses: []string{addr}})
	req, err := http.NewRequest(http.MethodPut, "https://"+s.gateway+gatewaywire.PathFences+node, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestStorageGatewayFailover: node 1's machine (a network namespace) loses its power; the
// policy's only method is the storage gateway on a storage host (another namespace, real
// nftables, the real palisade-agent gateway). After the fence the storage refuses node 1 and
// still serves node 2; a replayed fence command with an older token is refused; deleting the
// NodeFence lifts nothing while node 1 is out of service, and once its taint is removed the
// storage serves it again, and a replay of the fence's own command is refused by then.
func TestStorageGatewayFailover(t *testing.T) {
	lan := netns.New(t)
	storage := startStorageHost(t, lan)
	db1, db2 := lan.AddNode("db1"), lan.AddNode("db2")
	env := startScene(t, scenario.Options{
		Node: func(i int, so *simnode.Options) {
			if i == 1 {
				so.InternalIP = db1.IP()
			}
		},
		Policy: func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods = []v1alpha1.Method{{Name: "gateway", Type: v1alpha1.MethodStorageGateway, Timeout: &metav1.Duration{Duration: 20 * time.Second},
				StorageGateway: &v1alpha1.StorageGatewayMethod{Gateways: []string{storage.gateway},
					TLSSecretRef: v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "gateway-tls"}}}}
		},
	})
	ctx := context.Background()
	if err := env.Cluster.Client.Create(ctx, storage.secret()); err != nil {
		t.Fatal(err)
	}
	if !storage.Served(t, db1) || !storage.Served(t, db2) {
		t.Fatal("the storage does not serve the nodes before any fence")
	}
	// A cluster that fenced before: the counter stands at 40 (the scene's controller has no
	// namespace of its own, so its counter Lease lives in "default").
	counter := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: fencing.TokenLeaseName,
		Annotations: map[string]string{fencing.AnnotationLastToken: "40"}}}
	if err := env.Cluster.Client.Create(ctx, counter); err != nil {
		t.Fatal(err)
	}
	startController(t, env)
	deploy(t, env)
	n1 := env.Node(1)
	if err := n1.BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, fenceEnded)
	want := []string{"StorageFence:Succeeded", "ConfirmStorageFenced:Succeeded", "VerifyFenced:Succeeded", "Taint:Succeeded", "DeletePods:Succeeded", "ReleaseAttachments:Succeeded"}
	if diff := cmp.Diff(want, trace(nf)); diff != "" {
		t.Fatalf("step trace (-want +got):\n%s", diff)
	}
	if nf.Status.Token != 41 {
		t.Fatalf("the fence drew token %d, want 41 after the counter's 40", nf.Status.Token)
	}
	if storage.Served(t, db1) {
		t.Fatal("released, but the storage still serves node 1")
	}
	if !storage.Served(t, db2) {
		t.Error("the fence of node 1 cut node 2 off the storage too")
	}
	if code, body := storage.replay(t, n1.Name(), db1.IP(), nf.Status.Token-1); code != http.StatusConflict {
		t.Errorf("a fence command with an older token than %d: %d %s; want 409 %s", nf.Status.Token, code, body, gatewaywire.ReasonStaleToken)
	}

	if err := env.Cluster.Client.Delete(ctx, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}}); err != nil {
		t.Fatal(err)
	}
	waitFence(t, env.Cluster, n1.Name(), 20*time.Second, func(nf *v1alpha1.NodeFence) bool {
		c := meta.FindStatusCondition(nf.Status.Conditions, fencing.ConditionStorageFenceLifted)
		return c != nil && c.Reason == fencing.ReasonAwaitingNodeRepair
	})
	if storage.Served(t, db1) {
		t.Fatal("the storage fence was lifted while node 1 carries the out-of-service taint")
	}
	boot := n1.BootID()
	if err := n1.BMC.SetPower(true); err != nil {
		t.Fatal(err)
	}
	// Repaired means running again: lifted while its Lease is still stale, the node would be
	// found failed and fenced anew.
	waitBooted(t, env, n1, boot)
	removeOutOfServiceTaint(t, env, n1.Name())
	waitGone(t, env, n1.Name())
	if !storage.Served(t, db1) {
		t.Error("the NodeFence is gone but the storage still refuses node 1")
	}
	code, body := storage.replay(t, n1.Name(), db1.IP(), nf.Status.Token)
	if code != http.StatusConflict || !storage.Served(t, db1) {
		t.Errorf("a replay of the lifted fence's own command: %d %s; want 409 %s and node 1 still served", code, body, gatewaywire.ReasonStaleToken)
	}
	assertNoSecret(t, env, string(storage.certs.Client.KeyPEM))
	t.Logf("replay refused: %s", body)
}

// TestStorageGatewayUnreachableReleasesNothing: a gateway that does not answer leaves the fence
// unconfirmed until the method's timeout; the fence fails, saying so, and nothing is released.
func TestStorageGatewayUnreachableReleasesNothing(t *testing.T) {
	lan := netns.New(t)
	storage := startStorageHost(t, lan)
	// A port nothing listens on behind the storage host's address: refused at once.
	dead := net.JoinHostPort(storage.IP(), "9447")
	env := startScene(t, scenario.Options{Policy: func(p *v1alpha1.FencingPolicy) {
		p.Spec.Methods = []v1alpha1.Method{{Name: "gateway", Type: v1alpha1.MethodStorageGateway, Timeout: &metav1.Duration{Duration: 4 * time.Second},
			StorageGateway: &v1alpha1.StorageGatewayMethod{Gateways: []string{storage.gateway, dead},
				TLSSecretRef: v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "gateway-tls"}}}}
	}})
	if err := env.Cluster.Client.Create(context.Background(), storage.secret()); err != nil {
		t.Fatal(err)
	}
	startController(t, env)
	w := deploy(t, env)
	n1 := env.Node(1)
	n1.PauseHeartbeats()
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, fenceEnded)
	n1.ResumeHeartbeats()
	if nf.Status.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("phase %s with one of two gateways unreachable, want Failed: %v", nf.Status.Phase, trace(nf))
	}
	if st, reason, msg := condition(nf, v1alpha1.ConditionFenced); st != "False" || reason != "StorageGatewayUnreachable" {
		t.Errorf("Fenced condition %s/%s (%s), want False/StorageGatewayUnreachable", st, reason, msg)
	}
	assertNothingReleased(t, env, w)
}

// TestStorageGatewayFenceOfALiveNodeReleasesNothing: the gateway confirms its fence of node 1
// (the storage refuses it), but node 1 keeps renewing its Lease (a manual request on a live
// node): the fence is disproved, nothing is released, the chain escalates and fails; deleting
// the NodeFence lifts the fence at once, since nothing was released.
func TestStorageGatewayFenceOfALiveNodeReleasesNothing(t *testing.T) {
	lan := netns.New(t)
	storage := startStorageHost(t, lan)
	db1 := lan.AddNode("db1")
	env := startScene(t, scenario.Options{
		Node: func(i int, so *simnode.Options) {
			if i == 1 {
				so.InternalIP = db1.IP()
			}
		},
		Policy: func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods = []v1alpha1.Method{{Name: "gateway", Type: v1alpha1.MethodStorageGateway, Timeout: &metav1.Duration{Duration: 20 * time.Second},
				StorageGateway: &v1alpha1.StorageGatewayMethod{Gateways: []string{storage.gateway},
					TLSSecretRef: v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "gateway-tls"}}},
				{Name: "self-fence", Type: v1alpha1.MethodSelfFence, Timeout: &metav1.Duration{Duration: 8 * time.Second},
					SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 3 * time.Second}}}}
		},
	})
	ctx := context.Background()
	if err := env.Cluster.Client.Create(ctx, storage.secret()); err != nil {
		t.Fatal(err)
	}
	startController(t, env)
	w := deploy(t, env)
	n1 := env.Node(1)
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: storage-gateway fence of a live node"})
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, fenceEnded)
	if nf.Status.Phase != v1alpha1.PhaseFailed {
		t.Errorf("phase %s, want Failed: %v", nf.Status.Phase, trace(nf))
	}
	if storage.Served(t, db1) {
		t.Fatalf("the storage serves node 1: the gateway's fence never held, and the test did not test (%v)", trace(nf))
	}
	assertDisproved(t, nf, "gateway")
	assertNothingReleased(t, env, w)

	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: nil})
	if err := env.Cluster.Client.Delete(ctx, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, env, n1.Name())
	if !storage.Served(t, db1) {
		t.Error("the failed fence's NodeFence is gone, but the storage still refuses node 1")
	}
}
