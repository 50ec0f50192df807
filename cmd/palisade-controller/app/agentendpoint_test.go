package app_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"palisade.dev/palisade/providers/agent/pki"

	"github.com/go-logr/logr"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/pki/pkitest"
	"palisade.dev/palisade/providers/agent/pki/signer"
	"palisade.dev/palisade/test/testbed"
)

const ns = "palisade-system"

// replica is one controller replica's options: its pod, its heartbeat port and files.
func replica(t *testing.T, pod string) app.Options {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	dir := t.TempDir()
	return app.Options{
		MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true,
		LeaderElection: true, LeaderElectionNS: ns, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 300 * time.Millisecond,
		Agents: channel.ServerOptions{Addr: addr, CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), CAFile: filepath.Join(dir, "ca.crt")},
		AgentCerts: app.AgentCertOptions{CASecret: "palisade-agent-ca", CAConfigMap: "palisade-agent-ca", Namespace: ns,
			AgentServiceAccount: ns + "/palisade-agent", ServerHosts: []string{"127.0.0.1"}},
		Pod: app.PodRef{Namespace: ns, Name: pod},
	}
}

// start builds the manager (which already removes a stale label) and runs it; the returned
// function stops it and waits.
func start(t *testing.T, c *testbed.Cluster, o app.Options) func() {
	t.Helper()
	mgr, err := app.NewManager(c.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := endpointLabel(t, c, o.Pod.Name); got != "" {
		t.Errorf("pod %s still labelled %s=%q once its replica started", o.Pod.Name, app.LabelAgentEndpoint, got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("replica %s: %v", o.Pod.Name, err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

func endpointLabel(t *testing.T, c *testbed.Cluster, pod string) string {
	t.Helper()
	p, err := c.Kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Labels[app.LabelAgentEndpoint]
}

func waitLabel(t *testing.T, c *testbed.Cluster, pod, want string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		got := endpointLabel(t, c, pod)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: label %s=%q after %s, want %q", pod, app.LabelAgentEndpoint, got, within, want)
		}
	}
}

// TestAgentEndpointFollowsTheLeader runs two replicas of the controller against the real API
// server, each with a Pod object standing in for its pod: only the leader's pod carries the
// agent-endpoint label (a stale one is removed at start), the leader signs an agent's CSR and
// accepts its heartbeat, and when it stops the label moves to the new leader's pod.
func TestAgentEndpointFollowsTheLeader(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, Controllers: []string{"serviceaccount-token-controller"}})
	ctx := context.Background()
	agents := pkitest.Setup(t, c.Kube, c.Config, ns, "palisade-agent")
	for _, name := range []string{"controller-0", "controller-1"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{app.LabelAgentEndpoint: "true"}}, // stale
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "palisade-controller"}}},
		}
		if _, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := replica(t, "controller-0"), replica(t, "controller-1")
	stopA := start(t, c, a)
	waitLabel(t, c, "controller-0", "true", 20*time.Second)
	start(t, c, b)
	time.Sleep(2 * time.Second) // a standby that took the label would have by now
	if got := endpointLabel(t, c, "controller-1"); got != "" {
		t.Fatalf("the standby's pod is labelled %s=%q", app.LabelAgentEndpoint, got)
	}
	heartbeat(t, agents, a)

	stopA()
	waitLabel(t, c, "controller-0", "", 5*time.Second)
	waitLabel(t, c, "controller-1", "true", 20*time.Second)
	bundleA, _ := os.ReadFile(a.Agents.CAFile)
	bundleB, _ := os.ReadFile(b.Agents.CAFile)
	if len(bundleA) == 0 || string(bundleA) != string(bundleB) {
		t.Error("the replicas serve with different agent CAs")
	}
	heartbeat(t, agents, b)
}

// heartbeat gets an agent certificate through a CSR (pod-bound token on node-a) and sends a
// heartbeat with it to the replica's server.
func heartbeat(t *testing.T, agents *pkitest.Agents, o app.Options) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-a"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	kube := agents.Client(t, agents.PodToken(t, "node-a"))
	ctx := context.Background()
	csr, err := kube.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-a-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: signer.SignerName, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth},
			Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var certPEM []byte
	for deadline := time.Now().Add(20 * time.Second); len(certPEM) == 0; time.Sleep(100 * time.Millisecond) {
		got, err := kube.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if certPEM = got.Status.Certificate; len(certPEM) == 0 && time.Now().After(deadline) {
			t.Fatalf("CSR %s not signed within 20s: %+v", csr.Name, got.Status)
		}
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pair := pki.KeyPair{CertPEM: certPEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
	if err := pair.WriteFiles(filepath.Join(dir, "agent.crt"), filepath.Join(dir, "agent.key")); err != nil {
		t.Fatal(err)
	}
	cl, err := channel.NewClient(channel.ClientOptions{Address: o.Agents.Addr, CertFile: filepath.Join(dir, "agent.crt"), KeyFile: filepath.Join(dir, "agent.key"), CAFile: o.Agents.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var sendErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, sendErr = cl.Send(sctx, agentwire.Report{Node: "node-a", Seq: 1, IntervalMillis: 1000, SentAt: time.Now()})
		cancel()
		if sendErr == nil {
			return
		}
		if !strings.Contains(sendErr.Error(), "connection refused") { // the server starts with leadership
			break
		}
	}
	t.Fatalf("heartbeat to the leader %s: %v", o.Pod.Name, sendErr)
}
