// Package simkubelettest builds the simkubelet command (the test bed's kubelet stand-in),
// writes kubeconfigs for it, and runs it from tests, inside a node's network namespace
// (package netns) or in the test's own.
package simkubelettest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"palisade.dev/palisade/test/testbed/netns"
)

// pkg is the simkubelet command's import path.
const pkg = "palisade.dev/palisade/test/testbed/simkubelet"

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// Build builds simkubelet once per test binary into a temporary directory and returns the
// binary's path; it fails the test when the build fails. Call Cleanup from TestMain to remove
// the directory.
func Build(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "palisade-simkubelet-"); build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "simkubelet")
		if out, err := exec.Command("go", "build", "-o", build.bin, pkg).CombinedOutput(); err != nil {
			build.err = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatalf("building simkubelet: %v", build.err)
	}
	return build.bin
}

// Cleanup removes what Build made; call it from TestMain after m.Run.
func Cleanup() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}

// WriteKubeconfig writes, into a directory of t, a kubeconfig for a process that reaches the
// API server of cfg at server ("host:port", e.g. a netns relay) with cfg's credentials. The
// API server's certificate does not name the relay's address, so tls-server-name is set to
// a DNS name the certificate carries (read from the API server's certificate): the
// certificate is verified against cfg's CA, never skipped.
func WriteKubeconfig(t testing.TB, cfg *rest.Config, server string) string {
	t.Helper()
	name, err := certDNSName(cfg)
	if err != nil {
		t.Fatalf("writing kubeconfig for %s: %v", server, err)
	}
	const n = "simkubelet"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[n] = &clientcmdapi.Cluster{Server: "https://" + server, CertificateAuthorityData: cfg.CAData, TLSServerName: name}
	kc.AuthInfos[n] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts[n] = &clientcmdapi.Context{Cluster: n, AuthInfo: n}
	kc.CurrentContext = n
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("writing kubeconfig %s: %v", path, err)
	}
	return path
}

// certDNSName connects to cfg's API server, verifying its certificate as cfg does, and
// returns the certificate's first DNS name (envtest's: "localhost").
func certDNSName(cfg *rest.Config) (string, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return "", fmt.Errorf("parsing API server address %q: %w", cfg.Host, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.CAData) {
		return "", errors.New("the rest.Config has no CA data (CAData): use the test bed's Cluster.Config")
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: pool, ServerName: cfg.ServerName}}
	c, err := d.Dial("tcp", u.Host)
	if err != nil {
		return "", fmt.Errorf("reading the API server's certificate at %s: %w", u.Host, err)
	}
	defer c.Close()
	certs := c.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 || len(certs[0].DNSNames) == 0 {
		return "", fmt.Errorf("the API server's certificate at %s names no DNS name to verify it by", u.Host)
	}
	return certs[0].DNSNames[0], nil
}

// Options configures a simkubelet process.
type Options struct {
	// Binary is the simkubelet binary; default Build(t).
	Binary string
	// Kubeconfig is the kubeconfig file (WriteKubeconfig); required.
	Kubeconfig string
	// NodeName is the Node whose Lease is renewed; required.
	NodeName string
	// RenewInterval is --renew-interval; 0 keeps simkubelet's default (10s).
	RenewInterval time.Duration
	// HealthzAddress and PortAddress are --healthz-address and --port-address; "" keeps the
	// defaults (127.0.0.1:10248 and 0.0.0.0:10250, which collide outside a node namespace).
	HealthzAddress, PortAddress string
}

// Process is a running simkubelet.
type Process struct {
	cmd     *exec.Cmd
	node    *netns.Node
	healthz string
	logPath string
	done    chan struct{}
	err     error // exit status, valid once done is closed
}

// Start runs simkubelet inside node's namespace (in the test's own namespace when node is
// nil) and waits until its healthz answers. The process is killed in t.Cleanup, which also
// logs the tail of its log when the test failed.
func Start(t testing.TB, node *netns.Node, opts Options) *Process {
	t.Helper()
	if opts.Kubeconfig == "" || opts.NodeName == "" {
		t.Fatal("starting simkubelet: Options.Kubeconfig and Options.NodeName are required")
	}
	if opts.Binary == "" {
		opts.Binary = Build(t)
	}
	if opts.HealthzAddress == "" {
		opts.HealthzAddress = "127.0.0.1:10248"
	}
	args := []string{"--kubeconfig=" + opts.Kubeconfig, "--node-name=" + opts.NodeName, "--healthz-address=" + opts.HealthzAddress}
	if opts.RenewInterval > 0 {
		args = append(args, "--renew-interval="+opts.RenewInterval.String())
	}
	if opts.PortAddress != "" {
		args = append(args, "--port-address="+opts.PortAddress)
	}
	p := &Process{node: node, healthz: opts.HealthzAddress, logPath: filepath.Join(t.TempDir(), "simkubelet.log"), done: make(chan struct{})}
	if err := p.start(opts.Binary, args); err != nil {
		t.Fatalf("starting simkubelet for node %s: %v", opts.NodeName, err)
	}
	t.Cleanup(func() {
		_ = p.Kill()
		if t.Failed() {
			t.Logf("simkubelet %s log:\n%s", opts.NodeName, p.Log())
		}
	})
	if err := p.waitHealthy(t.Context(), 10*time.Second); err != nil {
		t.Fatalf("starting simkubelet for node %s: %v\n%s", opts.NodeName, err, p.Log())
	}
	return p
}

func (p *Process) start(bin string, args []string) error {
	log, err := os.Create(p.logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	if p.node != nil {
		p.cmd = p.node.Command(context.Background(), bin, args...)
	} else {
		p.cmd = exec.Command(bin, args...)
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		return err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return nil
}

func (p *Process) waitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := p.Healthz(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("simkubelet exited: %v", p.err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("healthz not answering within %s: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Healthz GETs the healthz endpoint (from inside the node's namespace) with a 1s timeout and
// returns nil when it answers 200 "ok".
func (p *Process) Healthz(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	tr := &http.Transport{DisableKeepAlives: true}
	if p.node != nil {
		tr.DialContext = p.node.Dial
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.healthz+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		return fmt.Errorf("healthz answered %d %q", resp.StatusCode, body)
	}
	return nil
}

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill SIGKILLs the process ("the kubelet died") and waits until it is gone.
func (p *Process) Kill() error {
	return p.signalAndWait(syscall.SIGKILL, 10*time.Second)
}

// Stop sends SIGTERM and waits up to 5s for a clean exit; it returns an error when the
// process did not exit with status 0 in time (and then kills it).
func (p *Process) Stop() error {
	if err := p.signalAndWait(syscall.SIGTERM, 5*time.Second); err != nil {
		_ = p.Kill()
		return err
	}
	return p.err
}

func (p *Process) signalAndWait(sig syscall.Signal, wait time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("simkubelet (pid %d) still running %s after %s", p.Pid(), wait, sig)
	}
}

// Log is what the process has logged so far (JSON lines).
func (p *Process) Log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading simkubelet log: %v)", err)
	}
	return string(b)
}

// ServerName is the DNS name, read from the API server's certificate, that a process reaching
// the API server of cfg through a relay verifies the certificate by (WriteKubeconfig's
// tls-server-name).
func ServerName(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	name, err := certDNSName(cfg)
	if err != nil {
		t.Fatalf("reading the API server's certificate: %v", err)
	}
	return name
}
