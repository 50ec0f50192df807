package main

import (
	"context"
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"palisade.dev/palisade/providers/agent/pki"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/pki/pkitest"
	"palisade.dev/palisade/providers/agent/pki/signer"
	"palisade.dev/palisade/test/testbed"
)

const (
	csrNamespace = "palisade-system"
	caConfigMap  = csrNamespace + "/palisade-agent-ca"
)

// csrEnv is a real API server with the controller's Signer running, its CA published, and a
// heartbeat Server whose certificate the same CA issued.
type csrEnv struct {
	cluster *testbed.Cluster
	agents  *pkitest.Agents
	ca      *pki.CA
	apiCA   string // the API server's CA bundle file
	beats   chan agentwire.Heartbeat
	addr    string // of the heartbeat Server
}

func newCSREnv(t *testing.T) *csrEnv {
	t.Helper()
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, Controllers: []string{"serviceaccount-token-controller"}})
	ctx := context.Background()
	e := &csrEnv{cluster: c, agents: pkitest.Setup(t, c.Kube, c.Config, csrNamespace, "palisade-agent"), beats: make(chan agentwire.Heartbeat, 100)}
	var err error
	if e.ca, err = signer.EnsureCA(ctx, c.Client, types.NamespacedName{Namespace: csrNamespace, Name: "palisade-agent-ca"}); err != nil {
		t.Fatal(err)
	}
	if err := signer.PublishBundle(ctx, c.Client, types.NamespacedName{Namespace: csrNamespace, Name: "palisade-agent-ca"}, e.ca); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e.apiCA = filepath.Join(dir, "apiserver-ca.crt")
	if err := os.WriteFile(e.apiCA, c.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	e.startSigner(t)
	sc := &signer.ServerCert{CA: e.ca, Hosts: []string{"127.0.0.1"},
		CertFile: filepath.Join(dir, "server.crt"), KeyFile: filepath.Join(dir, "server.key"), CAFile: filepath.Join(dir, "ca.crt")}
	if err := sc.Ensure(); err != nil {
		t.Fatal(err)
	}
	srv, err := channel.NewServer(channel.ServerOptions{Addr: "127.0.0.1:0", CertFile: sc.CertFile, KeyFile: sc.KeyFile, CAFile: sc.CAFile,
		OnHeartbeat: func(hb agentwire.Heartbeat) {
			select {
			case e.beats <- hb:
			default:
			}
		}})
	if err == nil {
		err = srv.Listen()
	}
	if err != nil {
		t.Fatal(err)
	}
	e.addr = srv.Addr()
	runUntilCleanup(t, srv.Start)
	return e
}

func (e *csrEnv) startSigner(t *testing.T) {
	t.Helper()
	mgr, err := ctrl.NewManager(e.cluster.Config, ctrl.Options{
		Scheme: e.cluster.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&signer.Signer{Client: mgr.GetClient(), CA: e.ca, AgentUser: signer.ServiceAccountUser(csrNamespace, "palisade-agent")}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, mgr.Start)
}

// runUntilCleanup runs start until the test ends.
func runUntilCleanup(t *testing.T, start func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stopping: %v", err)
		}
	})
}

// tokenFile writes a token of the agents' ServiceAccount bound to a pod on node.
func (e *csrEnv) tokenFile(t *testing.T, node string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(e.agents.PodToken(t, node)), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (e *csrEnv) certOptions(t *testing.T, tokenFile string) pki.RequesterConfig {
	return pki.RequesterConfig{Dir: t.TempDir(), APIServer: e.cluster.Config.Host, TokenFile: tokenFile, APICAFile: e.apiCA,
		CAConfigMap: caConfigMap, CheckInterval: time.Second}
}

// TestCertificatesThroughCSRAPI runs the agent's side of the CSR API against the real API
// server and the controller's Signer: the pod-bound token's request for its own node is
// signed, the files work for heartbeats, renewal replaces them, a request for another node is
// refused with the controller's reason, files from an earlier run are used without the API
// server, and a certificate of a replaced CA is replaced at start.
func TestCertificatesThroughCSRAPI(t *testing.T) {
	if pki.SignerName != signer.SignerName || pki.AgentOrganization != signer.AgentOrganization {
		t.Fatalf("the agent asks for signer %q, organization %q; the controller signs %q, %q", pki.SignerName, pki.AgentOrganization, signer.SignerName, signer.AgentOrganization)
	}
	e := newCSREnv(t)

	t.Run("binary requests, then heartbeats", func(t *testing.T) {
		dir := t.TempDir()
		p := &proc{cmd: exec.Command(agentBin, "--request-certificate", "--cert-dir", dir, "--api-server", e.cluster.Config.Host,
			"--api-token-file", e.tokenFile(t, "node-a"), "--api-ca-file", e.apiCA, "--ca-configmap", caConfigMap,
			"--node-name", "node-a", "--controller-address", e.addr, "--interval", "200ms", "--state-dir", dir,
			"--kubelet-healthz", "http://127.0.0.1:1/healthz", "--probe-address", "", "--kubelet-port", "0"), done: make(chan struct{})}
		p.cmd.Stderr = p
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = p.cmd.Wait(); close(p.done) }()
		defer func() {
			if t.Failed() {
				t.Logf("agent logs:\n%s", p.logs())
			}
		}()
		waitBeat(t, e.beats, "node-a", 30*time.Second)
		for _, f := range []string{pki.CertFileName, pki.KeyFileName, pki.CAFileName} {
			st, err := os.Stat(filepath.Join(dir, f))
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v, mode %v; want mode 0600", f, err, st.Mode())
			}
		}
		if code := p.stop(t); code != 0 {
			t.Errorf("agent exited with %d", code)
		}
	})

	t.Run("renewal past half-life", func(t *testing.T) {
		o := e.certOptions(t, e.tokenFile(t, "node-a"))
		var now atomic.Pointer[time.Time]
		o.Now = func() time.Time {
			if at := now.Load(); at != nil {
				return *at
			}
			return time.Now()
		}
		r, err := pki.NewRequester(o, "node-a", testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := r.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		certFile, keyFile, caFile := r.Paths()
		first := serial(t, certFile, keyFile)
		client, err := channel.NewClient(channel.ClientOptions{Address: e.addr, CertFile: certFile, KeyFile: keyFile, CAFile: caFile})
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		send(t, client, "node-a")
		if err := r.RenewIfDue(ctx); err != nil || serial(t, certFile, keyFile) != first {
			t.Fatalf("a fresh certificate was renewed (err %v)", err)
		}
		later := time.Now().Add(pki.DefaultLeafValidity/2 + time.Minute)
		now.Store(&later)
		if err := r.RenewIfDue(ctx); err != nil {
			t.Fatal(err)
		}
		if serial(t, certFile, keyFile) == first {
			t.Fatal("a certificate past its half-life was not renewed")
		}
		send(t, client, "node-a") // the client re-reads the files
	})

	t.Run("another node is refused with the reason", func(t *testing.T) {
		o := e.certOptions(t, e.tokenFile(t, "node-a"))
		r, err := pki.NewRequester(o, "node-b", testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = r.Ensure(ctx)
		if err == nil || !pki.IsPermanent(err) || !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), `is not the node "node-a"`) {
			t.Fatalf("ensure = %v, want a denial naming node-a", err)
		}
		if _, err := os.Stat(filepath.Join(o.Dir, pki.CertFileName)); !os.IsNotExist(err) {
			t.Errorf("a certificate file was written for a denied request: %v", err)
		}
	})

	t.Run("files of an earlier run are used without the API server", func(t *testing.T) {
		o := e.certOptions(t, e.tokenFile(t, "node-a"))
		r, err := pki.NewRequester(o, "node-a", testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Ensure(context.Background()); err != nil {
			t.Fatal(err)
		}
		o.APIServer = "https://127.0.0.1:1" // nothing listens there
		r2, err := pki.NewRequester(o, "node-a", testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r2.Ensure(ctx); err != nil {
			t.Fatalf("ensure with valid files and no API server: %v", err)
		}
		r3, err := pki.NewRequester(o, "node-c", testr.New(t)) // the files are for node-a
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := r3.Ensure(ctx); err == nil {
			t.Fatal("ensure for another node used node-a's files")
		}
	})

	t.Run("a certificate of a replaced CA is replaced at start", func(t *testing.T) {
		o := e.certOptions(t, e.tokenFile(t, "node-a"))
		old, err := pki.NewCA()
		if err != nil {
			t.Fatal(err)
		}
		pair, err := old.IssueAgent("node-a")
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile, caFile := filepath.Join(o.Dir, pki.CertFileName), filepath.Join(o.Dir, pki.KeyFileName), filepath.Join(o.Dir, pki.CAFileName)
		if err := pair.WriteFiles(certFile, keyFile); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(caFile, old.CertPEM(), 0o600); err != nil {
			t.Fatal(err)
		}
		oldSerial := serial(t, certFile, keyFile)
		r, err := pki.NewRequester(o, "node-a", testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Ensure(context.Background()); err != nil {
			t.Fatal(err)
		}
		if serial(t, certFile, keyFile) == oldSerial {
			t.Fatal("kept a certificate that does not chain to the published CA")
		}
		client, err := channel.NewClient(channel.ClientOptions{Address: e.addr, CertFile: certFile, KeyFile: keyFile, CAFile: caFile})
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		send(t, client, "node-a")
	})
}

func waitBeat(t *testing.T, beats <-chan agentwire.Heartbeat, node string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case hb := <-beats:
			if hb.Node == node {
				return
			}
		case <-deadline:
			t.Fatalf("no heartbeat from %s within %s", node, within)
		}
	}
}

func send(t *testing.T, c *channel.Client, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Send(ctx, agentwire.Report{Node: node, Seq: 1, IntervalMillis: 1000, SentAt: time.Now()}); err != nil {
		t.Fatalf("heartbeat with the requested certificate: %v", err)
	}
}

func serial(t *testing.T, certFile, keyFile string) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf.SerialNumber.String()
}

// TestCertificateFlags checks the flag rules of --request-certificate.
func TestCertificateFlags(t *testing.T) {
	base := []string{"--controller-address", "c:9443", "--node-name", "n"}
	if _, err := parseFlags(append(base, "--request-certificate", "--ca-configmap", "ns/cm")); err != nil {
		t.Errorf("--request-certificate without --cert: %v", err)
	}
	if _, err := parseFlags(append(base, "--request-certificate", "--cert", "x")); err == nil || !strings.Contains(err.Error(), "cannot be combined") {
		t.Errorf("--request-certificate with --cert: %v, want a refusal", err)
	}
	if _, err := parseFlags(append(base, "--request-certificate", "--ca-configmap", "cm")); err == nil || !strings.Contains(err.Error(), "namespace/name") {
		t.Errorf("--ca-configmap without a namespace: %v, want a refusal", err)
	}
	if _, err := parseFlags(base); err == nil || !strings.Contains(err.Error(), "--cert is required") {
		t.Errorf("neither --cert nor --request-certificate: %v, want a refusal", err)
	}
}
