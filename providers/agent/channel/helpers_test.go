package channel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"palisade.dev/palisade/providers/agent/pki"
)

// testPKI is a CA with its bundle and the server's certificate files in a temporary directory.
type testPKI struct {
	dir                       string
	ca                        *pki.CA
	caFile, certFile, keyFile string
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &testPKI{dir: dir, ca: ca, caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "server.crt"), keyFile: filepath.Join(dir, "server.key")}
	if err := os.WriteFile(p.caFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	p.issueServer(t)
	return p
}

// issueServer writes a new server certificate and returns it.
func (p *testPKI) issueServer(t *testing.T) *x509.Certificate {
	t.Helper()
	pair, err := p.ca.IssueServer([]string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if err := pair.WriteFiles(p.certFile, p.keyFile); err != nil {
		t.Fatal(err)
	}
	return leaf(t, pair)
}

// agentFiles issues an agent certificate signed by ca and writes it next to the bundle.
func (p *testPKI) agentFiles(t *testing.T, ca *pki.CA, node string) (certFile, keyFile string) {
	t.Helper()
	pair, err := ca.IssueAgent(node)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(p.dir, node+".crt"), filepath.Join(p.dir, node+".key")
	if err := pair.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func leaf(t *testing.T, pair *pki.KeyPair) *x509.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

// startServer runs a Server on loopback until the test ends.
func startServer(t *testing.T, p *testPKI, opts ServerOptions) *Server {
	t.Helper()
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	opts.CertFile, opts.KeyFile, opts.CAFile = p.certFile, p.keyFile, p.caFile
	s, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server stopped with %v", err)
		}
	})
	return s
}

func newClient(t *testing.T, p *testPKI, addr, certFile, keyFile string) *Client {
	t.Helper()
	return newClientWith(t, p, ClientOptions{Address: addr, CertFile: certFile, KeyFile: keyFile})
}

// newClientWith is newClient with more options; p's CA and a 5 s timeout are filled in.
func newClientWith(t *testing.T, p *testPKI, opts ClientOptions) *Client {
	t.Helper()
	opts.CAFile, opts.Timeout = p.caFile, 5*time.Second
	c, err := NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// rawClient is a plain HTTP client trusting p's CA and presenting certs (none when empty),
// with a new connection per request.
func rawClient(p *testPKI, certs ...tls.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.ca.CertPEM())
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: certs, ServerName: "127.0.0.1"},
		ForceAttemptHTTP2: true,
		DisableKeepAlives: true,
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

func loadPair(t *testing.T, certFile, keyFile string) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// logLines is a logger that keeps every line.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

// waitFor waits up to 5 s for a line holding every one of parts.
func (l *logLines) waitFor(t *testing.T, parts ...string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		for _, line := range l.lines {
			if containsAll(line, parts) {
				l.mu.Unlock()
				return
			}
		}
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("no log line with %q in:\n%s", parts, strings.Join(l.lines, "\n"))
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
