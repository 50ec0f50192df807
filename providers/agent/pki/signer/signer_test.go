package signer_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"palisade.dev/palisade/providers/agent/pki"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/pki/pkitest"
	"palisade.dev/palisade/providers/agent/pki/signer"
	"palisade.dev/palisade/test/testbed"
)

const ns = "palisade-system"

// startCluster runs a control plane without the CSI stack and with only the controllers the
// test needs (none of them signs or approves CSRs).
func startCluster(t *testing.T) *testbed.Cluster {
	t.Helper()
	return testbed.StartT(t, testbed.Options{NoCSIAttacher: true, Controllers: []string{"serviceaccount-token-controller"}})
}

func newRequest(t *testing.T, cn string) []byte {
	t.Helper()
	return pkitest.CSR(t, metav1.ObjectMeta{}, cn, pki.SignerName).Spec.Request
}

func createCSR(t *testing.T, kube kubernetes.Interface, name, signer, cn string, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	if len(usages) == 0 {
		usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	}
	csr, err := kube.CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.CertificateSigningRequestSpec{SignerName: signer, Usages: usages, Request: newRequest(t, cn)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating CSR %s: %v", name, err)
	}
	return csr
}

// waitDecided waits until the CSR is denied, failed, or approved and signed.
func waitDecided(t *testing.T, kube kubernetes.Interface, name string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		csr, err := kube.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(csr.Status.Certificate) > 0 || condition(csr, certificatesv1.CertificateDenied) != nil || condition(csr, certificatesv1.CertificateFailed) != nil {
			return csr
		}
		if time.Now().After(deadline) {
			t.Fatalf("CSR %s undecided after 30s: %+v", name, csr.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func condition(csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i, c := range csr.Status.Conditions {
		if c.Type == typ {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}

// startSigner runs a manager with the Signer until the test ends.
func startSigner(t *testing.T, c *testbed.Cluster, ca *pki.CA, agentUser string) {
	t.Helper()
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme: c.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&signer.Signer{Client: mgr.GetClient(), CA: ca, AgentUser: agentUser}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// TestSignerOnAPIServer runs the Signer against the real API server on CSRs made with real
// ServiceAccount tokens: it signs only a pod-bound token's request for its own node.
func TestSignerOnAPIServer(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	agents := pkitest.Setup(t, c.Kube, c.Config, ns, "palisade-agent")
	ca, err := signer.EnsureCA(ctx, c.Client, types.NamespacedName{Namespace: ns, Name: "palisade-agent-ca"})
	if err != nil {
		t.Fatal(err)
	}
	agentUser := signer.ServiceAccountUser(ns, "palisade-agent")

	// Before the Signer runs: a CSR of another signer, and one approved by the admin for a
	// requester that is not the agent.
	other := createCSR(t, c.Kube, "other-signer", "example.com/other", "node-a")
	byAdmin := createCSR(t, c.Kube, "approved-by-admin", signer.SignerName, "node-a")
	byAdmin.Status.Conditions = append(byAdmin.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Manual", Message: "by hand"})
	if _, err := c.Kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, byAdmin.Name, byAdmin, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	startSigner(t, c, ca, agentUser)

	onA := agents.Client(t, agents.PodToken(t, "node-a"))
	unbound := agents.Client(t, agents.UnboundToken(t))
	tests := []struct {
		name    string
		kube    kubernetes.Interface
		cn      string
		usages  []certificatesv1.KeyUsage
		wantErr string // "" means signed; otherwise in the Denied (or Failed) message
	}{
		{name: "own node", kube: onA, cn: "node-a"},
		{name: "another node", kube: onA, cn: "node-b", wantErr: `CommonName "node-b" is not the node "node-a"`},
		{name: "token not bound to a pod", kube: unbound, cn: "node-a", wantErr: "not bound to a pod on a node"},
		{name: "server auth usage", kube: onA, cn: "node-a", usages: []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}, wantErr: `lack "client auth"`},
		{name: "not the agents' ServiceAccount", kube: c.Kube, cn: "node-a", wantErr: "only the agents' ServiceAccount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := strings.ReplaceAll(tt.name, " ", "-")
			name = strings.ReplaceAll(name, "'", "")
			created := createCSR(t, tt.kube, name, signer.SignerName, tt.cn, tt.usages...)
			if tt.kube == onA {
				// The API server records the pod's node from the pod-bound token.
				if got := created.Spec.Extra[signer.NodeNameExtra]; len(got) != 1 || got[0] != "node-a" {
					t.Fatalf("spec.extra[%s] = %q, want [node-a] (extra: %v)", signer.NodeNameExtra, got, created.Spec.Extra)
				}
			}
			csr := waitDecided(t, c.Kube, name)
			if tt.wantErr != "" {
				d := condition(csr, certificatesv1.CertificateDenied)
				if d == nil || !strings.Contains(d.Message, tt.wantErr) || len(csr.Status.Certificate) > 0 {
					t.Fatalf("want Denied with %q and no certificate, got %+v", tt.wantErr, csr.Status)
				}
				return
			}
			if condition(csr, certificatesv1.CertificateApproved) == nil {
				t.Fatalf("signed without an Approved condition: %+v", csr.Status)
			}
			checkAgentCert(t, ca, csr.Status.Certificate, "node-a")
		})
	}

	t.Run("approved by someone else for another requester", func(t *testing.T) {
		csr := waitDecided(t, c.Kube, "approved-by-admin")
		f := condition(csr, certificatesv1.CertificateFailed)
		if f == nil || !strings.Contains(f.Message, "only the agents' ServiceAccount") || len(csr.Status.Certificate) > 0 {
			t.Fatalf("want Failed with the reason and no certificate, got %+v", csr.Status)
		}
	})
	t.Run("other signer untouched", func(t *testing.T) {
		got, err := c.Kube.CertificatesV1().CertificateSigningRequests().Get(ctx, other.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Conditions) > 0 || len(got.Status.Certificate) > 0 || got.ResourceVersion != other.ResourceVersion {
			t.Fatalf("CSR of another signer was changed: %+v", got.Status)
		}
	})
}

func checkAgentCert(t *testing.T, ca *pki.CA, certPEM []byte, node string) {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatalf("status.certificate is not PEM: %q", certPEM)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate does not verify as a client certificate of the CA: %v", err)
	}
	if cert.Subject.CommonName != node {
		t.Errorf("CommonName = %q, want %q", cert.Subject.CommonName, node)
	}
}

// TestCAAndServerCert checks that the CA is made once and kept, that its bundle is published,
// that a broken CA Secret gets a message saying what to do, and that the server certificate
// files are written, kept while current and reissued past their half-life.
func TestCAAndServerCert(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: "palisade-agent-ca"}
	ca1, err := signer.EnsureCA(ctx, c.Client, key)
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := signer.EnsureCA(ctx, c.Client, key)
	if err != nil {
		t.Fatal(err)
	}
	if !ca1.Cert.Equal(ca2.Cert) {
		t.Error("a second EnsureCA made another CA")
	}
	if s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, key.Name, metav1.GetOptions{}); err != nil || s.Type != corev1.SecretTypeTLS {
		t.Errorf("CA Secret: %v, type %v; want kubernetes.io/tls", err, s.Type)
	}
	cmKey := types.NamespacedName{Namespace: ns, Name: "palisade-agent-ca-bundle"}
	for range 2 { // create, then leave as is
		if err := signer.PublishBundle(ctx, c.Client, cmKey, ca1); err != nil {
			t.Fatal(err)
		}
	}
	cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, cmKey.Name, metav1.GetOptions{})
	if err != nil || cm.Data[pki.SecretCAKey] != string(ca1.CertPEM()) {
		t.Fatalf("bundle ConfigMap: %v, %v; want the CA certificate", err, cm.Data)
	}

	dir := t.TempDir()
	now := time.Now()
	sc := &signer.ServerCert{CA: ca1, Hosts: []string{"palisade-agent-heartbeat.palisade-system.svc", "127.0.0.1"},
		CertFile: filepath.Join(dir, "tls", "tls.crt"), KeyFile: filepath.Join(dir, "tls", "tls.key"), CAFile: filepath.Join(dir, "tls", "ca.crt"),
		Now: func() time.Time { return now }}
	if err := sc.Ensure(); err != nil {
		t.Fatal(err)
	}
	first := read(t, sc.CertFile)
	if _, err := channel.NewServer(channel.ServerOptions{Addr: "127.0.0.1:0", CertFile: sc.CertFile, KeyFile: sc.KeyFile, CAFile: sc.CAFile}); err != nil {
		t.Fatalf("the heartbeat server cannot load the files: %v", err)
	}
	if err := sc.Ensure(); err != nil || !bytes.Equal(read(t, sc.CertFile), first) {
		t.Fatalf("a current certificate was reissued (err %v)", err)
	}
	now = now.Add(pki.DefaultLeafValidity / 2)
	if err := sc.Ensure(); err != nil || bytes.Equal(read(t, sc.CertFile), first) {
		t.Fatalf("a certificate past its half-life was kept (err %v)", err)
	}

	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken-ca"}, Data: map[string][]byte{"tls.crt": []byte("x")}}
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, broken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = signer.EnsureCA(ctx, c.Client, types.NamespacedName{Namespace: ns, Name: "broken-ca"})
	if err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Errorf("EnsureCA on a broken Secret: %v, want an error saying to delete it", err)
	}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
