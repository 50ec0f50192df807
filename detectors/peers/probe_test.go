package peers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/pki"

	"github.com/go-logr/logr"
)

// agentPKI issues agent certificates of a CA (and of a foreign one) into a test's directory.
type agentPKI struct {
	t         *testing.T
	dir       string
	ca, other *pki.CA
	pool      func() (*x509.CertPool, error)
}

func newAgentPKI(t *testing.T) *agentPKI {
	t.Helper()
	p := &agentPKI{t: t, dir: t.TempDir()}
	var err error
	if p.ca, err = pki.NewCA(); err != nil {
		t.Fatal(err)
	}
	if p.other, err = pki.NewCA(); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(p.dir, "ca.crt")
	if err := pki.WriteFileAtomic(caFile, p.ca.CertPEM()); err != nil {
		t.Fatal(err)
	}
	src, err := pki.CAPoolSource(caFile, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	p.pool = src.Current
	return p
}

// cert is an agent certificate for node issued by c, as the agent loads it.
func (p *agentPKI) cert(name string, c *pki.CA, node string) func() (*tls.Certificate, error) {
	p.t.Helper()
	pair, err := c.IssueAgent(node)
	crt, key := filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	if err == nil {
		err = pair.WriteFiles(crt, key)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	src, err := pki.KeyPairSource(crt, key, logr.Discard())
	if err != nil {
		p.t.Fatal(err)
	}
	return src.Current
}

// serve answers probes with cert, checking probers against the CA.
func (p *agentPKI) serve(cert func() (*tls.Certificate, error)) (*ProbeServer, string) {
	p.t.Helper()
	s, err := ListenProbes("127.0.0.1:0", cert, p.pool, logr.Discard())
	if err != nil {
		p.t.Fatal(err)
	}
	go s.Serve()
	p.t.Cleanup(s.Close)
	return s, "127.0.0.1:" + strconv.Itoa(s.Port())
}

func probeWith(d *ProbeDialer, addr, node string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return d.Probe(ctx, addr, node)
}

func TestProbeChecksTheNode(t *testing.T) {
	p := newAgentPKI(t)
	_, nodeA := p.serve(p.cert("a", p.ca, "node-a"))
	_, foreign := p.serve(p.cert("x", p.other, "node-a"))
	plain, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never speaks TLS
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	go func() {
		for {
			c, err := plain.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	d := NewProbeDialer(p.pool, p.cert("b", p.ca, "node-b"))
	if err := probeWith(d, nodeA, "node-a"); err != nil {
		t.Errorf("probing node-a at its address: %v", err)
	}
	for _, tc := range []struct{ what, addr, node, want string }{
		{"another node at the address", nodeA, "node-b", `is node "node-a", not "node-b"`},
		{"a certificate of another CA", foreign, "node-a", "not an agent certificate of the CA"},
		{"something that is no agent", plain.Addr().String(), "node-a", ""},
		{"nothing listening", "127.0.0.1:1", "node-a", ""},
	} {
		err := probeWith(d, tc.addr, tc.node)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.what, err, tc.want)
		}
	}
}

// A probe counts (nil) only once the peer's agent acknowledged it, which it does only after it
// recorded the prober by its agent certificate of the CA: a probe the peer cannot report to the
// controller never counts as a path for the prober's self-fence.
func TestProbeIsAcknowledgedOnlyWhenRecorded(t *testing.T) {
	p := newAgentPKI(t)
	s, addr := p.serve(p.cert("a", p.ca, "node-a"))
	if got := s.ProbedBy(time.Minute); len(got) != 0 {
		t.Fatalf("probed by %+v before any probe", got)
	}
	before := time.Now()
	if err := probeWith(NewProbeDialer(p.pool, p.cert("b", p.ca, "node-b")), addr, "node-a"); err != nil {
		t.Fatalf("probe by node-b: %v", err)
	}
	got := s.ProbedBy(time.Minute)
	if len(got) != 1 || got[0].Node != "node-b" || !got[0].Reachable || got[0].At.Before(before) || got[0].At.After(time.Now()) {
		t.Fatalf("probed by %+v, want node-b once, reachable, at the probe", got)
	}
	if got := s.ProbedBy(0); len(got) != 0 {
		t.Errorf("probed within 0s by %+v, want none: the window bounds what is reported", got)
	}
	for _, tc := range []struct {
		what string
		cert func() (*tls.Certificate, error)
	}{
		{"a prober with a certificate of another CA", p.cert("y", p.other, "node-y")},
		{"a prober without a certificate (an agent that records no probes, or no agent)", func() (*tls.Certificate, error) { return &tls.Certificate{}, nil }},
	} {
		err := probeWith(NewProbeDialer(p.pool, tc.cert), addr, "node-a")
		if !errors.Is(err, ErrNotAcknowledged) || !strings.Contains(err.Error(), "did not acknowledge") {
			t.Errorf("%s: %v, want the probe not acknowledged", tc.what, err)
		}
	}
	if got := s.ProbedBy(time.Minute); len(got) != 1 || got[0].Node != "node-b" {
		t.Errorf("probed by %+v after unacknowledged probes, want node-b alone", got)
	}
}

// ProbedBy reports the latest probe of each prober, most recent first, at most
// agentwire.MaxPeers; the server remembers at most maxProbers, forgetting the oldest.
func TestProbedByIsBounded(t *testing.T) {
	s := &ProbeServer{probedBy: map[string]time.Time{}}
	now := time.Now()
	for i := range maxProbers + 10 {
		s.record("n"+strconv.Itoa(i), now.Add(time.Duration(i-maxProbers-10)*time.Millisecond))
	}
	s.record("n0", now) // forgotten as the oldest, then seen again
	if len(s.probedBy) != maxProbers {
		t.Fatalf("%d probers remembered, want the bound %d", len(s.probedBy), maxProbers)
	}
	got := s.ProbedBy(time.Minute)
	if len(got) != agentwire.MaxPeers || got[0].Node != "n0" || !got[0].At.Equal(now) {
		t.Fatalf("%d reports, the first %+v; want %d, n0 first", len(got), got[0], agentwire.MaxPeers)
	}
	for i := 1; i < len(got); i++ {
		if got[i].At.After(got[i-1].At) {
			t.Fatalf("reports out of order at %d: %+v after %+v", i, got[i], got[i-1])
		}
	}
	var nilServer *ProbeServer
	if got := nilServer.ProbedBy(time.Minute); got != nil {
		t.Errorf("a node that answers no probes reports %+v", got)
	}
}
