package channel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/pki"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func TestHeartbeatAccepted(t *testing.T) {
	p := newPKI(t)
	got := make(chan agentwire.Heartbeat, 10)
	s := startServer(t, p, ServerOptions{Now: func() time.Time { return t0 }, OnHeartbeat: func(hb agentwire.Heartbeat) { got <- hb }})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	c := newClient(t, p, s.Addr(), certFile, keyFile)
	agentClock := t0.Add(-time.Hour) // an hour behind the controller
	rep := agentwire.Report{
		Node: "n1", BootID: "b1", Seq: 7, KubeletHealthy: true, IntervalMillis: 1000, SentAt: agentClock,
		Peers: []agentwire.PeerReport{{Node: "n2", Reachable: true, At: agentClock.Add(-2 * time.Second)}, {Node: "n3", At: agentClock.Add(time.Minute)}},
	}
	if _, err := c.Send(context.Background(), rep); err != nil {
		t.Fatal(err)
	}
	want := agentwire.Heartbeat{
		Node: "n1", BootID: "b1", Seq: 7, KubeletHealthy: true, Interval: time.Second, Received: t0,
		SentAt:       agentClock, // Sent not placed: the node's first heartbeat
		CertNotAfter: loadPair(t, certFile, keyFile).Leaf.NotAfter,
		// On the controller's clock; a time in the future is clamped to the receipt.
		Peers: []agentwire.PeerReport{{Node: "n2", Reachable: true, At: t0.Add(-2 * time.Second)}, {Node: "n3", At: t0}},
	}
	if diff := cmp.Diff(map[string]agentwire.Heartbeat{"n1": want}, s.Snapshot()); diff != "" {
		t.Errorf("snapshot (-want +got):\n%s", diff)
	}
	if n := len(got); n != 1 {
		t.Errorf("OnHeartbeat called %d times, want 1", n)
	}
	if id, err := c.Identity(); err != nil || id != "n1" {
		t.Errorf("Identity() = %q, %v; want n1", id, err)
	}
}

// A heartbeat the network delayed (an HTTPS request sent during a partition, retransmitted
// after the heal) arrives after heartbeats its agent process sent since: it is not recorded, so
// the node is not shown as it was before (its kubelet healthy, no order yet) at a time it no
// longer is, nor heard after a moment it was sent before. A restarted agent's heartbeats
// (another Instance, Seq from 1 again), a new boot's, those of an agent that names no Instance,
// and a lower Seq once the recorded one is overtakenFor old (a machine restored from a memory
// snapshot) are recorded. An overtaken heartbeat's peers' acknowledgements still count in
// LastReached, which must miss none.
func TestOvertakenHeartbeatNotRecorded(t *testing.T) {
	p := newPKI(t)
	now := t0
	heard := 0
	s := startServer(t, p, ServerOptions{Now: func() time.Time { return now }, OnHeartbeat: func(agentwire.Heartbeat) { heard++ }})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	c := newClient(t, p, s.Addr(), certFile, keyFile)
	var probedBy []agentwire.PeerReport
	send := func(after time.Duration, boot, instance string, seq uint64, healthy bool) {
		t.Helper()
		now = now.Add(after)
		if _, err := c.Send(context.Background(), agentwire.Report{Node: "n1", BootID: boot, Instance: instance, Seq: seq, KubeletHealthy: healthy,
			IntervalMillis: 1000, SentAt: now, ProbedBy: probedBy}); err != nil {
			t.Fatal(err)
		}
	}
	latest := func(wantSeq uint64, wantHealthy bool, received time.Time, what string) {
		t.Helper()
		hb, _, ok := s.Latest("n1")
		if !ok || hb.Seq != wantSeq || hb.KubeletHealthy != wantHealthy || !hb.Received.Equal(received) {
			t.Errorf("%s: latest heartbeat seq %d kubelet healthy %v received %s (%v), want seq %d, %v, received %s",
				what, hb.Seq, hb.KubeletHealthy, hb.Received, ok, wantSeq, wantHealthy, received)
		}
	}
	send(time.Second, "b1", "i1", 63, true)
	send(time.Second, "b1", "i1", 64, false) // the agent stopped its kubelet
	at64 := now
	probedBy = []agentwire.PeerReport{{Node: "n2", Reachable: true, At: now.Add(time.Second)}}
	send(2*time.Second, "b1", "i1", 50, true) // sent during the partition, arrived after the heal
	probedBy = nil
	latest(64, false, at64, "a heartbeat sent before the latest, delayed")
	if heard != 2 {
		t.Errorf("OnHeartbeat called %d times, want 2: not for the delayed one", heard)
	}
	if got := s.LastReached("n2"); !got.Equal(at64.Add(time.Second)) {
		t.Errorf("LastReached(n2) = %s, want the delayed heartbeat's acknowledgement at %s", got, at64.Add(time.Second))
	}
	send(time.Second, "b1", "i2", 1, true) // the agent restarted
	latest(1, true, now, "a restarted agent's")
	send(time.Second, "b2", "i2", 1, false) // a new boot (an Instance drawn alike is no matter)
	latest(1, false, now, "a new boot's")
	send(time.Second, "b2", "i2", 40, false)
	send(overtakenFor-time.Second, "b2", "i2", 20, true)
	latest(40, false, now.Add(-overtakenFor+time.Second), "a lower Seq within overtakenFor")
	send(time.Second, "b2", "i2", 21, true) // restored from a snapshot
	latest(21, true, now, "a lower Seq after overtakenFor")
	send(time.Second, "b2", "", 9, true)
	send(time.Second, "b2", "", 2, false) // an agent naming no Instance: taken as before
	latest(2, false, now, "an agent without Instance")
}

// TestHeartbeatsShareOneConnection: heartbeats go over HTTP/1.1, and an agent's heartbeats,
// answered with 204 or with a body, all go over the one connection its first one opened.
func TestHeartbeatsShareOneConnection(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	resp, err := rawClient(p, loadPair(t, certFile, keyFile)).Post("https://"+s.Addr()+agentwire.HeartbeatPath, "application/json", strings.NewReader(`{"node":"n1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Proto != "HTTP/1.1" {
		t.Errorf("got %s over %s, want 204 over HTTP/1.1", resp.Status, resp.Proto)
	}

	// Over HTTPS only: with datagrams, heartbeats after the first need no connection at all
	// (TestHeartbeatDatagrams).
	c := newClientWith(t, p, ClientOptions{Address: s.Addr(), CertFile: certFile, KeyFile: keyFile, NoDatagrams: true})
	var opened, reused int
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused++
		} else {
			opened++
		}
	}})
	for seq := range 5 {
		if seq == 2 {
			s.SetCommand("n1", agentwire.Command{ID: "c1", Action: agentwire.ActionTerminate})
		}
		if seq == 4 {
			s.ClearCommand("n1", "c1")
		}
		if _, err := c.Exchange(ctx, agentwire.Report{Node: "n1", Seq: uint64(seq) + 1}); err != nil {
			t.Fatalf("heartbeat %d: %v", seq, err)
		}
	}
	if opened != 1 || reused != 4 {
		t.Errorf("5 heartbeats opened %d connections and reused one %d times, want 1 and 4", opened, reused)
	}
}

// TestRejectedAtHandshake: a client the CA did not certify as an agent never gets to send; the
// server's handshake fails, for the reason the case names.
func TestRejectedAtHandshake(t *testing.T) {
	p := newPKI(t)
	logs := &logLines{}
	s := startServer(t, p, ServerOptions{Logger: logs.logger()})
	other, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	expiring := *p.ca
	expiring.LeafValidity = time.Nanosecond
	pair := func(ca *pki.CA, node string) tls.Certificate {
		certFile, keyFile := p.agentFiles(t, ca, node)
		return loadPair(t, certFile, keyFile)
	}
	tests := []struct {
		name, serverError string
		certs             []tls.Certificate
	}{
		{"certificate from another CA", "unknown authority", []tls.Certificate{pair(other, "n1")}},
		{"no client certificate", "didn't provide a certificate", nil},
		{"server certificate posing as an agent", "incompatible key usage", []tls.Certificate{loadPair(t, p.certFile, p.keyFile)}},
		{"expired agent certificate", "expired", []tls.Certificate{pair(&expiring, "n2")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := rawClient(p, tt.certs...).Post("https://"+s.Addr()+agentwire.HeartbeatPath, "application/json", strings.NewReader(`{"node":"n1"}`))
			if err == nil {
				resp.Body.Close()
				t.Fatalf("accepted with %s", resp.Status)
			}
			logs.waitFor(t, "TLS handshake error", tt.serverError)
		})
	}
	// The same through the agent's own Client.
	certFile, keyFile := p.agentFiles(t, other, "n3")
	_, err = newClient(t, p, s.Addr(), certFile, keyFile).Send(context.Background(), agentwire.Report{Node: "n3"})
	if err == nil || IsRejected(err, 0) {
		t.Errorf("Send with a foreign certificate: %v, want a handshake error", err)
	}
	if snap := s.Snapshot(); len(snap) != 0 {
		t.Errorf("snapshot %v, want empty", snap)
	}
}

func TestBodyNamingAnotherNode(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	c := newClient(t, p, s.Addr(), certFile, keyFile)
	for _, node := range []string{"n2", ""} {
		if _, err := c.Send(context.Background(), agentwire.Report{Node: node, KubeletHealthy: true}); !IsRejected(err, http.StatusForbidden) {
			t.Errorf("heartbeat naming %q with n1's certificate: %v, want 403", node, err)
		}
	}
	if snap := s.Snapshot(); len(snap) != 0 {
		t.Errorf("snapshot %v, want empty", snap)
	}
}

func TestBadRequests(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	client := rawClient(p, loadPair(t, certFile, keyFile))
	tooMany := fmt.Sprintf(`{"node":"n1","peers":[%s{"node":"x","at":"2026-01-01T00:00:00Z"}]}`, strings.Repeat(`{"node":"x","at":"2026-01-01T00:00:00Z"},`, agentwire.MaxPeers))
	tests := []struct {
		name, method, body string
		want               int
	}{
		{"GET", http.MethodGet, "", http.StatusMethodNotAllowed},
		{"not JSON", http.MethodPost, "hello", http.StatusBadRequest},
		{"too many peers", http.MethodPost, tooMany, http.StatusBadRequest},
		{"peer without time", http.MethodPost, `{"node":"n1","peers":[{"node":"n2"}]}`, http.StatusBadRequest},
		{"too large", http.MethodPost, `{"node":"n1","bootID":"` + strings.Repeat("x", agentwire.MaxBodyBytes) + `"}`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, "https://"+s.Addr()+agentwire.HeartbeatPath, strings.NewReader(tt.body))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
	if snap := s.Snapshot(); len(snap) != 0 {
		t.Errorf("snapshot %v, want empty", snap)
	}
}

// TestCertificateExpiredDuringConnection: a connection outliving its client certificate is
// refused, even though its handshake was valid.
func TestCertificateExpiredDuringConnection(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{Now: func() time.Time { return time.Now().Add(48 * time.Hour) }})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	c := newClient(t, p, s.Addr(), certFile, keyFile)
	if _, err := c.Send(context.Background(), agentwire.Report{Node: "n1"}); !IsRejected(err, http.StatusUnauthorized) {
		t.Errorf("Send: %v, want 401", err)
	}
}

func TestConcurrentHeartbeats(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 8 {
		node := fmt.Sprintf("n%d", i)
		certFile, keyFile := p.agentFiles(t, p.ca, node)
		c := newClient(t, p, s.Addr(), certFile, keyFile)
		wg.Go(func() {
			for seq := range uint64(10) {
				_, err := c.Send(context.Background(), agentwire.Report{Node: node, Seq: seq + 1})
				errs <- err
				_ = s.Snapshot()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	snap := s.Snapshot()
	for i := range 8 {
		if hb := snap[fmt.Sprintf("n%d", i)]; hb.Seq != 10 {
			t.Errorf("n%d: seq %d, want 10", i, hb.Seq)
		}
	}
	s.Forget("n0")
	if _, ok := s.Snapshot()["n0"]; ok {
		t.Error("n0 still in the snapshot after Forget")
	}
}

func TestNewServerFailsEarly(t *testing.T) {
	p := newPKI(t)
	if _, err := NewServer(ServerOptions{CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.certFile + ".missing"}); err == nil {
		t.Error("NewServer with a missing CA file succeeded")
	}
	if _, err := NewServer(ServerOptions{CertFile: p.caFile, KeyFile: p.keyFile, CAFile: p.caFile}); err == nil {
		t.Error("NewServer with a mismatched key succeeded")
	}
	s, err := NewServer(ServerOptions{Addr: "127.0.0.1:0", CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.caFile})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Start on a cancelled context: %v", err)
	}
}

// TestConnectionsBounded: with MaxConns open, a further connection is not served (its
// handshake does not finish) until one closes; by default the bound leaves ReservedFiles of
// the open-file limit to the rest of the process.
func TestConnectionsBounded(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{MaxConns: 2})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	pair := loadPair(t, certFile, keyFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.ca.CertPEM())
	dial := func() (*tls.Conn, error) {
		raw, err := net.Dial("tcp", s.Addr())
		if err != nil {
			return nil, err
		}
		c := tls.Client(raw, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if err := c.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return c, nil
	}
	var open []*tls.Conn
	for i := range 2 {
		c, err := dial()
		if err != nil {
			t.Fatalf("connection %d of 2: %v", i+1, err)
		}
		open = append(open, c)
	}
	if c, err := dial(); err == nil {
		c.Close()
		t.Fatal("a third connection was served with MaxConns 2")
	}
	open[0].Close()
	var third *tls.Conn
	deadline := time.Now().Add(5 * time.Second)
	for third == nil && time.Now().Before(deadline) {
		third, _ = dial()
	}
	if third == nil {
		t.Fatal("no connection served after one of the two closed")
	}
	third.Close()
	open[1].Close()

	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	if got, want := defaultMaxConns(), max(int(r.Cur)-ReservedFiles, int(r.Cur)/2); got != want {
		t.Errorf("default bound %d with an open-file limit of %d, want %d", got, r.Cur, want)
	}
}
