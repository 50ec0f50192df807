package storagehost

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"palisade.dev/palisade/providers/agent/pki"
)

// ControllerName is the CommonName of the controller's client certificate in Certs.
const ControllerName = "palisade-controller"

// Certs are a new CA's certificates for a server on a storage host and its client, the
// controller.
type Certs struct {
	CA *pki.CA
	// CAFile (ca.crt), CertFile (tls.crt) and KeyFile (tls.key) are the server's files.
	CAFile, CertFile, KeyFile string
	// Client is the controller's client certificate, CommonName ControllerName, of CA.
	Client *pki.KeyPair
}

// WriteCerts makes a CA and writes into dir its certificate and a server pair for hosts (IP
// addresses or DNS names); the controller's client certificate is in memory only.
func WriteCerts(t testing.TB, dir string, hosts ...string) *Certs {
	t.Helper()
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	c := &Certs{CA: ca, CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	server, err := ca.IssueServer(hosts)
	if err == nil {
		err = server.WriteFiles(c.CertFile, c.KeyFile)
	}
	if err == nil {
		err = pki.WriteFileAtomic(c.CAFile, ca.CertPEM())
	}
	if err == nil {
		c.Client, err = ca.IssueAgent(ControllerName)
	}
	if err != nil {
		t.Fatalf("writing certificates into %s: %v", dir, err)
	}
	return c
}

// HTTPClient is an HTTPS client that trusts c's CA and presents client (none when nil, or one
// of another CA's pairs). Its idle connections are closed when the test ends.
func (c *Certs) HTTPClient(t testing.TB, client *pki.KeyPair) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(c.CA.Cert)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if client != nil {
		pair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	tr := &http.Transport{TLSClientConfig: cfg}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// ServeTLS serves handler over TLS with cfg on a port of the storage host's address until the
// test ends, and returns that address, ip:port. The test fails if serving ends otherwise.
func (h *Host) ServeTLS(t testing.TB, handler http.Handler, cfg *tls.Config) string {
	t.Helper()
	ln, err := h.node.Listen("tcp", net.JoinHostPort(h.IP(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, TLSConfig: cfg, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving on storage host %s: %v", h.node.Name(), err)
		}
	})
	return ln.Addr().String()
}
