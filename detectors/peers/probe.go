package peers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
)

// probeHandshakeTimeout bounds one probe's TLS handshake on the answering side.
const probeHandshakeTimeout = 5 * time.Second

// ProbeServer answers peers' probes: a TLS handshake in which it presents the agent's own
// certificate (the client certificate the CA issued for its node), then closes. A probe thus
// learns not only that the node's kernel, network and agent are alive but that it reached the
// right node: an address reused by another machine, or another node's agent, is not it.
type ProbeServer struct {
	lis  net.Listener
	cert func() (*tls.Certificate, error)
	log  logr.Logger
}

// ListenProbes opens addr for probes, answering with the agent's certificate as cert returns
// it at each probe (so that a renewed one is served, as the heartbeat client does).
func ListenProbes(addr string, cert func() (*tls.Certificate, error), log logr.Logger) (*ProbeServer, error) {
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &ProbeServer{lis: lis, cert: cert, log: log}, nil
}

// Port is the port listened on.
func (s *ProbeServer) Port() int { return s.lis.Addr().(*net.TCPAddr).Port }

// Serve answers until Close.
func (s *ProbeServer) Serve() {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return s.cert()
	}}
	for {
		conn, err := s.lis.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error(err, "accepting peer probes stopped")
			}
			return
		}
		go func() {
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), probeHandshakeTimeout)
			defer cancel()
			_ = tls.Server(conn, cfg).HandshakeContext(ctx)
		}()
	}
}

// Close stops listening.
func (s *ProbeServer) Close() { _ = s.lis.Close() }

// ProbeDialer probes peers' ProbeServers.
type ProbeDialer struct {
	pool   func() (*x509.CertPool, error)
	dialer net.Dialer
}

// NewProbeDialer checks peers' certificates against the CA bundle pool returns at each probe.
func NewProbeDialer(pool func() (*x509.CertPool, error)) *ProbeDialer {
	return &ProbeDialer{pool: pool}
}

// Probe connects to addr and completes a TLS handshake whose certificate must chain to the CA,
// be an agent's (client-auth usage) and name node: nil means node answered.
func (d *ProbeDialer) Probe(ctx context.Context, addr, node string) error {
	conn, err := d.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	pool, err := d.pool()
	if err != nil {
		return err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// An agent's certificate is a client certificate and names a node, not a host: the
		// standard server check cannot apply. VerifyPeerCertificate does the whole check.
		InsecureSkipVerify: true, //nolint:gosec // verified below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyAgent(raw, pool, node)
		},
	}
	return tls.Client(conn, cfg).HandshakeContext(ctx)
}

// verifyAgent checks that raw (leaf first) is an agent certificate of the CA for node.
func verifyAgent(raw [][]byte, pool *x509.CertPool, node string) error {
	if len(raw) == 0 {
		return errors.New("the peer presented no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return fmt.Errorf("the peer's certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("the peer's certificate is not an agent certificate of the CA: %w", err)
	}
	if got := certs[0].Subject.CommonName; got != node {
		return fmt.Errorf("the peer at this address is node %q, not %q", got, node)
	}
	return nil
}
