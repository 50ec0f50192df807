package peers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
)

// probeHandshakeTimeout bounds one probe's TLS handshake on the answering side.
const probeHandshakeTimeout = 5 * time.Second

// probeAck is the byte a ProbeServer writes after it recorded a probing agent: the prober
// counts its probe answered only once it has read it, so that an agent never counts a path to a
// peer that the peer, and through its heartbeats the controller, did not see.
const probeAck = 1

// maxProbers bounds the probing agents a ProbeServer remembers (the controller assigns each node
// a few; more come only from a misassignment or a certificate holder probing at will).
const maxProbers = 4 * agentwire.MaxPeers

// ProbeServer answers peers' probes: a TLS handshake in which it presents the agent's own
// certificate (the client certificate the CA issued for its node), then closes. A probe thus
// learns not only that the node's kernel, network and agent are alive but that it reached the
// right node: an address reused by another machine, or another node's agent, is not it.
//
// A prober that presents its own agent certificate of the CA is recorded (ProbedBy) and
// answered with an acknowledgement: its heartbeats then tell the controller that the prober
// reached this node, which is the controller's only sight of that path. An agent counts itself
// connected to a peer only through acknowledged probes (Prober.AnyAcknowledged), so that it never
// holds back its self-fence on a path the controller cannot see (the peers that probe a node
// are not the ones it probes, and a firewall may pass one direction only).
type ProbeServer struct {
	lis  net.Listener
	cert func() (*tls.Certificate, error)
	pool func() (*x509.CertPool, error)
	log  logr.Logger

	mu       sync.Mutex
	probedBy map[string]time.Time // prober's node: when its latest probe was acknowledged
}

// ListenProbes opens addr for probes, answering with the agent's certificate as cert returns
// it at each probe (so that a renewed one is served, as the heartbeat client does), and
// checking probers' certificates against the CA bundle pool returns.
func ListenProbes(addr string, cert func() (*tls.Certificate, error), pool func() (*x509.CertPool, error), log logr.Logger) (*ProbeServer, error) {
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &ProbeServer{lis: lis, cert: cert, pool: pool, log: log, probedBy: map[string]time.Time{}}, nil
}

// Port is the port listened on.
func (s *ProbeServer) Port() int { return s.lis.Addr().(*net.TCPAddr).Port }

// Serve answers until Close.
func (s *ProbeServer) Serve() {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return s.cert()
	}, ClientAuth: tls.RequestClientCert}
	for {
		conn, err := s.lis.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error(err, "accepting peer probes stopped")
			}
			return
		}
		go s.answer(conn, cfg)
	}
}

// answer completes one probe's handshake and, when the prober presented an agent certificate
// of the CA, records it and acknowledges.
func (s *ProbeServer) answer(conn net.Conn, cfg *tls.Config) {
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), probeHandshakeTimeout)
	defer cancel()
	tc := tls.Server(conn, cfg)
	if tc.HandshakeContext(ctx) != nil {
		return
	}
	node, err := s.prober(tc.ConnectionState().PeerCertificates)
	if err != nil {
		return // a probe without an agent certificate: answered, not acknowledged
	}
	s.record(node, time.Now())
	_ = conn.SetWriteDeadline(time.Now().Add(probeHandshakeTimeout))
	_, _ = tc.Write([]byte{probeAck})
}

// prober is the node named by certs (leaf first) when they are an agent certificate of the CA.
func (s *ProbeServer) prober(certs []*x509.Certificate) (string, error) {
	if len(certs) == 0 || s.pool == nil {
		return "", errors.New("no agent certificate")
	}
	pool, err := s.pool()
	if err != nil {
		return "", err
	}
	if err := verifyChain(certs, pool); err != nil {
		return "", err
	}
	return certs[0].Subject.CommonName, nil
}

// record notes an acknowledged probe by node at now.
func (s *ProbeServer) record(node string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, known := s.probedBy[node]; !known && len(s.probedBy) >= maxProbers {
		oldest := ""
		for n, at := range s.probedBy {
			if oldest == "" || at.Before(s.probedBy[oldest]) {
				oldest = n
			}
		}
		delete(s.probedBy, oldest)
	}
	s.probedBy[node] = now
}

// ProbedBy are the agents whose probes this server acknowledged within the last within, each
// with the time of its latest, most recent first, at most agentwire.MaxPeers.
func (s *ProbeServer) ProbedBy(within time.Duration) []agentwire.PeerReport {
	if s == nil {
		return nil
	}
	now := time.Now()
	s.mu.Lock()
	out := make([]agentwire.PeerReport, 0, len(s.probedBy))
	for n, at := range s.probedBy {
		if now.Sub(at) <= within {
			out = append(out, agentwire.PeerReport{Node: n, Reachable: true, At: at})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b agentwire.PeerReport) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	return out[:min(len(out), agentwire.MaxPeers)]
}

// Close stops listening.
func (s *ProbeServer) Close() { _ = s.lis.Close() }

// ProbeDialer probes peers' ProbeServers.
type ProbeDialer struct {
	pool   func() (*x509.CertPool, error)
	cert   func() (*tls.Certificate, error)
	dialer net.Dialer
}

// NewProbeDialer checks peers' certificates against the CA bundle pool returns at each probe,
// and presents the agent's own certificate as cert returns it.
func NewProbeDialer(pool func() (*x509.CertPool, error), cert func() (*tls.Certificate, error)) *ProbeDialer {
	return &ProbeDialer{pool: pool, cert: cert}
}

// Probe connects to addr and completes a TLS handshake whose certificate must chain to the CA,
// be an agent's (client-auth usage) and name node, presenting the agent's own; nil means node
// answered and acknowledged the probe (it recorded this agent's visit for the controller),
// ErrNotAcknowledged that it answered only.
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
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c, err := d.cert(); err == nil {
				return c, nil
			}
			// Without its own certificate the agent still learns whether the peer is alive: the
			// probe is answered, not acknowledged (ErrNotAcknowledged).
			return &tls.Certificate{}, nil
		},
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(deadline)
	}
	ack := make([]byte, 1)
	if _, err := io.ReadFull(tc, ack); err != nil || ack[0] != probeAck {
		return fmt.Errorf("%w: node %s answered but did not acknowledge the probe (it does not take this agent's certificate, or runs an agent that records no probes): %v", ErrNotAcknowledged, node, err)
	}
	return nil
}

// ErrNotAcknowledged is Probe's error when the peer's agent answered, its certificate naming the
// node, but did not acknowledge: the peer is alive and reachable, yet the controller will not
// hear that this agent reached it.
var ErrNotAcknowledged = errors.New("probe not acknowledged")

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
	if err := verifyChain(certs, pool); err != nil {
		return err
	}
	if got := certs[0].Subject.CommonName; got != node {
		return fmt.Errorf("the peer at this address is node %q, not %q", got, node)
	}
	return nil
}

// verifyChain checks that certs (leaf first) are an agent certificate of the CA in pool.
func verifyChain(certs []*x509.Certificate, pool *x509.CertPool) error {
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("the peer's certificate is not an agent certificate of the CA: %w", err)
	}
	return nil
}
