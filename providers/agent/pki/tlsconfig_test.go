package pki_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr/testr"

	"palisade.dev/palisade/providers/agent/pki"
)

// handshake runs a TLS handshake of client against a server with cfg and returns the
// client's error and the server certificate it saw.
func handshake(t *testing.T, cfg, client *tls.Config) (*x509.Certificate, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		srv := tls.Server(s, cfg)
		err = srv.Handshake()
		if err == nil {
			_, err = srv.Write([]byte{1})
		}
		if err == nil {
			// Close only once the client has read and closed: closing first may reset the
			// connection under the client's read (seen with TLS 1.2).
			_, _ = io.Copy(io.Discard, srv)
		}
		srv.Close()
		done <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cl := tls.Client(c, client)
	err = cl.Handshake()
	var peer *x509.Certificate
	if err == nil {
		peer = cl.ConnectionState().PeerCertificates[0]
		// TLS 1.3: the server's verdict on the client certificate comes with the first read.
		_, err = cl.Read(make([]byte, 1))
	}
	cl.Close()
	serverErr := <-done
	if err == nil {
		err = serverErr
	}
	return peer, err
}

// TestServerTLSConfig: client certificates of the CA only, the minimum version held (and never
// below TLS 1.2), and a rewritten certificate file served from the next handshake on.
func TestServerTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	issue := func() *x509.Certificate {
		pair, err := ca.IssueServer([]string{"127.0.0.1"})
		if err == nil {
			err = pair.WriteFiles(certFile, keyFile)
		}
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf
	}
	first := issue()
	if err := pki.WriteFileAtomic(caFile, ca.CertPEM()); err != nil {
		t.Fatal(err)
	}
	cert, err := pki.KeyPairSource(certFile, keyFile, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pki.CAPoolSource(caFile, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := ca.IssueAgent("n1")
	if err != nil {
		t.Fatal(err)
	}
	agentPair, err := tls.X509KeyPair(agent.CertPEM, agent.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := func(max uint16, certs ...tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: certs, MaxVersion: max}
	}

	for _, c := range []struct {
		name   string
		min    uint16
		client *tls.Config
		ok     bool
	}{
		{"TLS 1.3 client of the CA", tls.VersionTLS13, client(0, agentPair), true},
		{"TLS 1.2 client, 1.3 required", tls.VersionTLS13, client(tls.VersionTLS12, agentPair), false},
		{"TLS 1.2 client, 1.2 allowed", tls.VersionTLS12, client(tls.VersionTLS12, agentPair), true},
		{"TLS 1.1 client, no minimum given", 0, client(tls.VersionTLS11, agentPair), false},
		{"no client certificate", tls.VersionTLS12, client(0), false},
		{"no client certificate, TLS 1.2", tls.VersionTLS12, client(tls.VersionTLS12), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := handshake(t, pki.ServerTLSConfig(c.min, cert, pool), c.client)
			if (err == nil) != c.ok {
				t.Errorf("handshake: %v; want success %v", err, c.ok)
			}
		})
	}

	cfg := pki.ServerTLSConfig(tls.VersionTLS12, cert, pool)
	if peer, err := handshake(t, cfg, client(0, agentPair)); err != nil || !peer.Equal(first) {
		t.Fatalf("first handshake: %v, or not the first certificate", err)
	}
	second := issue()
	if peer, err := handshake(t, cfg, client(0, agentPair)); err != nil || !peer.Equal(second) {
		t.Errorf("handshake after the rotation: %v, or not the new certificate", err)
	}
}
