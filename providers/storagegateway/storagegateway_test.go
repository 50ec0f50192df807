package storagegateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/agent/gateway"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/providers/storagegateway"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/testbed/storagehost"
)

// world is a real gateway (real nftables in a storage host's namespace) served over mutual TLS
// by the gateway's own handler, and the provider with the Secret and Node it reads.
type world struct {
	p      *storagegateway.Provider
	addr   string
	ca     *pki.CA
	secret *corev1.Secret
	reader client.Client
}

func newWorld(t *testing.T) *world {
	t.Helper()
	host := storagehost.Start(t, netns.New(t), "storage")
	g, err := gateway.New(context.Background(), gateway.Config{NFT: host.NFT(), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	certs := storagehost.WriteCerts(t, t.TempDir(), host.IP())
	cfg, err := gateway.ServerTLSConfig(certs.CertFile, certs.KeyFile, certs.CAFile, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	addr := host.ServeTLS(t, gateway.NewHandler(g, "gw-1", testr.New(t)), cfg)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "palisade-system", Name: "gw"},
		Data: map[string][]byte{storagegateway.KeyCA: certs.CA.CertPEM(), storagegateway.KeyCert: certs.Client.CertPEM, storagegateway.KeyKey: certs.Client.KeyPEM}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "db-1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.77.0.5"}}}}
	reader := fake.NewClientBuilder().WithObjects(secret, node).Build()
	return &world{p: storagegateway.New(reader), addr: addr, ca: certs.CA, secret: secret, reader: reader}
}

func (w *world) request(token, lift int64, gateways ...string) providers.Request {
	if len(gateways) == 0 {
		gateways = []string{w.addr}
	}
	return providers.Request{
		Fence: &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "db-1", UID: "uid-1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "db-1"},
			Status: v1alpha1.NodeFenceStatus{Token: token}},
		Method: v1alpha1.Method{Name: "gateway", Type: v1alpha1.MethodStorageGateway, StorageGateway: &v1alpha1.StorageGatewayMethod{
			Gateways: gateways, TLSSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "gw"}}},
		Now: time.Now(), LiftToken: lift,
	}
}

// TestFenceReadBackAndLift: the fence is a command, never a confirmation; the gateway's
// read-back confirms it; an older fence is refused and says so; the lift needs a newer token,
// reads the fence gone, and a later Check of the lifted fence fails rather than confirms.
func TestFenceReadBackAndLift(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	req := w.request(7, 0)
	if st, err := w.p.Check(ctx, req); err != nil || st.State != providers.InProgress {
		t.Fatalf("Check before any fence = %+v, %v; want InProgress", st, err)
	}
	st, err := w.p.Fence(ctx, req)
	if err != nil || st.State != providers.InProgress || !strings.Contains(st.Message, "10.77.0.5") {
		t.Fatalf("Fence = %+v, %v; want InProgress naming the address", st, err)
	}
	if st, err = w.p.Check(ctx, req); err != nil || st.State != providers.Confirmed || !strings.Contains(st.Message, "rejects 10.77.0.5 under token 7") {
		t.Fatalf("Check after the fence = %+v, %v; want Confirmed from the read-back", st, err)
	}
	if st, err := w.p.Fence(ctx, w.request(6, 0)); err != nil || st.State != providers.Failed || st.Reason != providers.ReasonStaleToken {
		t.Errorf("Fence with an older token = %+v, %v; want Failed %s", st, err, providers.ReasonStaleToken)
	}
	if _, err := w.p.Unfence(ctx, w.request(7, 7)); err == nil {
		t.Error("Unfence with the fence's own token was accepted: a replayed fence could follow it")
	}
	if st, err := w.p.Unfence(ctx, w.request(7, 9)); err != nil || st.State != providers.Confirmed {
		t.Fatalf("Unfence = %+v, %v; want Confirmed", st, err)
	}
	if st, err := w.p.Check(ctx, req); err != nil || st.State != providers.Failed || st.Reason != providers.ReasonStorageFenceRemoved {
		t.Errorf("Check of the lifted fence = %+v, %v; want Failed %s", st, err, providers.ReasonStorageFenceRemoved)
	}
	if st, err := w.p.Fence(ctx, req); err != nil || st.State != providers.Failed || st.Reason != providers.ReasonStaleToken {
		t.Errorf("the fence replayed after the lift = %+v, %v; want Failed %s", st, err, providers.ReasonStaleToken)
	}
	if st, err := w.p.Unfence(ctx, w.request(7, 8)); err != nil || st.State != providers.Confirmed {
		t.Errorf("an older lift after a newer one = %+v, %v; want Confirmed (nothing of the fence is left)", st, err)
	}
}

// TestBadTargetsSayWhatToFix: what a person must fix is a Failed BadTarget that says what; a
// gateway that does not answer is a retryable error (the command may have landed).
func TestBadTargetsSayWhatToFix(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	other, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*world, *providers.Request)
		says string
	}{
		{"no gateways", func(_ *world, r *providers.Request) { r.Method.StorageGateway.Gateways = nil }, "has no storageGateway.gateways"},
		{"gateway not host:port", func(_ *world, r *providers.Request) { r.Method.StorageGateway.Gateways = []string{"storage-1"} }, `"storage-1" is not host:port`},
		{"no secret", func(_ *world, r *providers.Request) { r.Method.StorageGateway.TLSSecretRef.Name = "missing" }, "Secret palisade-system/missing"},
		{"another CA", func(w *world, _ *providers.Request) {
			s := w.secret.DeepCopy()
			s.Data[storagegateway.KeyCA] = other.CertPEM()
			if err := w.reader.Update(ctx, s); err != nil {
				t.Fatal(err)
			}
		}, "certificate is not trusted"},
		{"a network in storage-cidrs", func(w *world, _ *providers.Request) {
			node := &corev1.Node{}
			if err := w.reader.Get(ctx, client.ObjectKey{Name: "db-1"}, node); err != nil {
				t.Fatal(err)
			}
			node.Annotations = map[string]string{v1alpha1.AnnotationStorageCIDRs: "10.77.0.0/24"}
			if err := w.reader.Update(ctx, node); err != nil {
				t.Fatal(err)
			}
		}, "10.77.0.0/24 is a network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			req := w.request(3, 0)
			tc.edit(w, &req)
			st, err := w.p.Fence(ctx, req)
			if err != nil || st.State != providers.Failed || st.Reason != providers.ReasonBadTarget || !strings.Contains(st.Message, tc.says) {
				t.Errorf("Fence = %+v, %v; want Failed BadTarget saying %q", st, err, tc.says)
			}
		})
	}
	_, err = w.p.Fence(ctx, w.request(3, 0, w.addr, "127.0.0.1:1"))
	if providers.ReasonOf(err) != providers.ReasonGatewayUnreachable || !providers.IsRetryable(err) {
		t.Errorf("Fence through an unreachable gateway = %v; want a retryable %s", err, providers.ReasonGatewayUnreachable)
	}
}
