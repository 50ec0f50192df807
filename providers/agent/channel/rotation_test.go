package channel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/pki"
)

// serverCertOf opens a new connection and returns the certificate the server presented.
func serverCertOf(t *testing.T, p *testPKI, addr string, client tls.Certificate) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.ca.CertPEM())
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{client}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// TestServerCertRotation: a server certificate replaced on disk is presented on every new
// connection; an unreadable replacement leaves the last good one in use.
func TestServerCertRotation(t *testing.T) {
	p := newPKI(t)
	logs := &logLines{}
	s := startServer(t, p, ServerOptions{Logger: logs.logger()})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	client := loadPair(t, certFile, keyFile)
	c := newClient(t, p, s.Addr(), certFile, keyFile)
	if _, err := c.Send(context.Background(), agentwire.Report{Node: "n1", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	first := serverCertOf(t, p, s.Addr(), client)

	second := p.issueServer(t)
	if got := serverCertOf(t, p, s.Addr(), client); got.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Fatalf("after rotation the server presents serial %s, want the new %s (old %s)", got.SerialNumber, second.SerialNumber, first.SerialNumber)
	}
	logs.waitFor(t, "reloaded certificate files")

	if err := os.WriteFile(p.certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serverCertOf(t, p, s.Addr(), client); got.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Errorf("with a broken certificate file the server presents serial %s, want the last good %s", got.SerialNumber, second.SerialNumber)
	}
	logs.waitFor(t, "keeping the last good ones")
	c.Close() // the agent's next heartbeat opens a new connection
	if _, err := c.Send(context.Background(), agentwire.Report{Node: "n1", Seq: 2}); err != nil {
		t.Errorf("heartbeat after the server's rotation: %v", err)
	}
}

// TestClientCertRotation: the agent presents its renewed certificate from the first heartbeat
// after the files change.
func TestClientCertRotation(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	c := newClient(t, p, s.Addr(), certFile, keyFile)
	if _, err := c.Send(context.Background(), agentwire.Report{Node: "n1", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	old := s.Snapshot()["n1"].CertNotAfter

	renewing := *p.ca
	renewing.LeafValidity = 48 * time.Hour
	pair, err := renewing.IssueAgent("n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := pair.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(context.Background(), agentwire.Report{Node: "n1", Seq: 2}); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Snapshot()["n1"].CertNotAfter, leaf(t, pair).NotAfter; !got.Equal(want) {
		t.Errorf("heartbeat came with a certificate expiring %s, want the renewed one's %s (old %s)", got, want, old)
	}
}

func TestCA(t *testing.T) {
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := pki.LoadCA(ca.CertPEM(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	agentPair, err := loaded.IssueAgent("node-a")
	if err != nil {
		t.Fatal(err)
	}
	cert := leaf(t, agentPair)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("agent certificate from the reloaded CA does not verify: %v", err)
	}
	if cert.Subject.CommonName != "node-a" {
		t.Errorf("agent CN = %q, want node-a", cert.Subject.CommonName)
	}
	if v := cert.NotAfter.Sub(cert.NotBefore); v < pki.DefaultLeafValidity || v > pki.DefaultLeafValidity+pki.ClockSkew {
		t.Errorf("agent certificate valid for %s, want %s", v, pki.DefaultLeafValidity)
	}
	serverPair, err := ca.IssueServer([]string{"palisade.example", "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if c := leaf(t, serverPair); c.VerifyHostname("10.0.0.1") != nil || c.VerifyHostname("palisade.example") != nil {
		t.Errorf("server certificate names %v %v", c.DNSNames, c.IPAddresses)
	}
	if _, err := ca.IssueServer(nil); err == nil {
		t.Error("IssueServer without hosts succeeded")
	}
	if _, err := ca.IssueAgent(""); err == nil {
		t.Error("IssueAgent without a node name succeeded")
	}
	if _, err := pki.LoadCA(agentPair.CertPEM, agentPair.KeyPEM); err == nil {
		t.Error("LoadCA accepted a leaf certificate")
	}
}

func TestNeedsRenewal(t *testing.T) {
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.IssueAgent("n1")
	if err != nil {
		t.Fatal(err)
	}
	c := leaf(t, pair)
	half := c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) / 2)
	for _, tt := range []struct {
		at   time.Time
		want bool
	}{{c.NotBefore, false}, {half.Add(-time.Second), false}, {half, true}, {c.NotAfter.Add(time.Hour), true}} {
		if got := pki.NeedsRenewal(pair.CertPEM, tt.at); got != tt.want {
			t.Errorf("NeedsRenewal at %s = %v, want %v", tt.at, got, tt.want)
		}
	}
	if !pki.NeedsRenewal([]byte("garbage"), time.Now()) {
		t.Error("an unreadable certificate does not need renewal")
	}
}
