package channel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
)

// TestHandshakesBounded: with MaxHandshakes 2, twenty connections that send nothing (each
// handshake waits for its ClientHello) hold 2 handshakes in progress, and an agent's heartbeat
// waits behind them; it gets through once they close. Without the bound (a goroutine per
// handshake, as with ServeTLS), 21 handshakes are in progress (the agent's too) and the
// heartbeat is answered at once: both checks fail.
func TestHandshakesBounded(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{MaxHandshakes: 2, handshakeTimeout: 4 * time.Second, helloTimeout: 4 * time.Second})
	stalled := dialStalled(t, s.Addr(), 20)
	waitUntil(t, "2 handshakes in progress", func() bool { return s.handshaking.Load() >= 2 })

	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	c := newClient(t, p, s.Addr(), certFile, keyFile)
	sent := make(chan error, 1)
	go func() {
		_, err := c.Send(context.Background(), agentwire.Report{Node: "n1", Seq: 1})
		sent <- err
	}()
	var most int64
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		most = max(most, s.handshaking.Load())
	}
	if most != 2 {
		t.Errorf("up to %d handshakes in progress at once with MaxHandshakes 2, want 2", most)
	}
	select {
	case err := <-sent:
		t.Fatalf("the heartbeat was answered (error %v) while the stalled connections held both handshake workers", err)
	default:
	}

	for _, conn := range stalled {
		conn.Close()
	}
	if err := <-sent; err != nil {
		t.Fatalf("heartbeat once the stalled connections closed: %v", err)
	}
	if _, ok := s.Snapshot()["n1"]; !ok {
		t.Error("the heartbeat is not in the snapshot")
	}
	waitUntil(t, "no handshake in progress", func() bool { return s.handshaking.Load() == 0 })
}

// TestMaxHandshakesDefault: 0 means DefaultMaxHandshakes.
func TestMaxHandshakesDefault(t *testing.T) {
	p := newPKI(t)
	s, err := NewServer(ServerOptions{CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.caFile})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.opts.MaxHandshakes, DefaultMaxHandshakes; got != want {
		t.Errorf("default MaxHandshakes %d, want %d", got, want)
	}
}

// TestHandshakeTimeout: an agent that sent its ClientHello and then stalls (it takes 1 s to
// send its certificate) has its connection closed once the handshake timeout has passed since
// its worker started, and the failure is logged as http.Server logged it.
func TestHandshakeTimeout(t *testing.T) {
	p := newPKI(t)
	s, l, logs := listenHandshakes(t, p, ServerOptions{MaxHandshakes: 1, handshakeTimeout: 300 * time.Millisecond})
	config := slowAgentTLSConfig(t, p, time.Second)
	start := time.Now()
	raw, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	stalled := make(chan struct{})
	go func() {
		defer close(stalled)
		_, _ = agentHandshake(raw, config) // its outcome is the client's view; the server's log is what counts
	}()
	logs.waitFor(t, "http: TLS handshake error from "+raw.LocalAddr().String(), "not completed within 300ms")
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("given up after %s, before the handshake timeout of 300ms", took)
	}
	<-stalled

	conn, err := dialAgent(s.Addr(), agentTLSConfig(t, p))
	if err != nil {
		t.Fatalf("a handshake after the timed-out one: %v", err)
	}
	defer conn.Close()
	acceptHandshaken(t, l)
}

// TestHandshakeQueueWaitBounded: a connection that waited for a worker longer than the
// handshake timeout is closed without a handshake (its agent has given up), and the next one
// is handshaken. The only worker is held by a handshaken connection nobody accepts yet.
func TestHandshakeQueueWaitBounded(t *testing.T) {
	s, l, logs, config, _ := holdOnlyWorker(t, 300*time.Millisecond)

	raw, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	late := make(chan error, 1)
	go func() {
		_, err := agentHandshake(raw, config)
		late <- err
	}()
	time.Sleep(400 * time.Millisecond) // in the queue, behind the first connection's worker

	acceptHandshaken(t, l)
	switch err := <-late; {
	case err == nil:
		t.Error("the connection queued longer than the handshake timeout was handshaken")
	case errors.Is(err, context.DeadlineExceeded):
		t.Error("the connection queued longer than the handshake timeout was left open")
	}
	logs.waitFor(t, "http: TLS handshake error from "+raw.LocalAddr().String(), "not started: waited", "longer than the handshake timeout 300ms")

	next, err := dialAgent(s.Addr(), config)
	if err != nil {
		t.Fatalf("a connection after the dropped one: %v", err)
	}
	defer next.Close()
	acceptHandshaken(t, l)
}

// TestHandshakesNewestFirst: of the connections waiting for a worker, the newest is handshaken
// first. Under more load than the processors can handshake, the oldest are those whose agents
// gave up: served first, every handshake went to a closed connection. The only worker is held
// by a handshaken connection nobody accepts yet, while two more connect, one after the other.
func TestHandshakesNewestFirst(t *testing.T) {
	s, l, _, config, first := holdOnlyWorker(t, 5*time.Second)
	waiting := make([]net.Conn, 2) // oldest first
	for i := range waiting {
		raw, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		go func() { _, _ = agentHandshake(raw, config) }()
		waiting[i] = raw
		waitUntil(t, fmt.Sprintf("%d connections queued", i+1), func() bool { return l.queue.len() == i+1 })
	}
	for i, want := range []net.Conn{first, waiting[1], waiting[0]} {
		conn, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if got := conn.RemoteAddr().String(); got != want.LocalAddr().String() {
			t.Errorf("accepted %d: the connection from %s, want %s (first, then the newest, then the oldest: %s, %s, %s)",
				i+1, got, want.LocalAddr(), first.LocalAddr(), waiting[1].LocalAddr(), waiting[0].LocalAddr())
		}
	}
}

// A full queue takes a new connection in place of the one that waited longest; connections are
// taken newest first.
func TestConnStack(t *testing.T) {
	s := newConnStack(2)
	q := func(i int) queuedConn { return queuedConn{at: t0.Add(time.Duration(i) * time.Second)} }
	for i := range 2 {
		if _, full := s.push(q(i)); full {
			t.Fatalf("push %d into a queue of 2: full", i)
		}
	}
	if old, full := s.push(q(2)); !full || !old.at.Equal(q(0).at) {
		t.Fatalf("push into a full queue returned %v, %v; want the oldest (%v), full", old.at, full, q(0).at)
	}
	if _, full := s.push(q(3)); !full {
		t.Fatal("push into a full queue: not full")
	}
	for _, want := range []int{3, 2} {
		select {
		case <-s.ready:
		default:
			t.Fatalf("no token for the connection of %d", want)
		}
		if got, ok := s.pop(); !ok || !got.at.Equal(q(want).at) {
			t.Errorf("pop = %v, %v; want %v", got.at, ok, q(want).at)
		}
	}
	select {
	case <-s.ready:
		t.Error("a token left with the queue empty")
	default:
	}
	if got, ok := s.pop(); ok {
		t.Errorf("pop from an empty queue = %v, true", got.at)
	}
	s.push(q(4))
	s.push(q(5))
	if d := s.drain(); len(d) != 2 || !d[0].at.Equal(q(4).at) || s.len() != 0 {
		t.Errorf("drain = %v, %d left; want the 2 queued, the oldest (%v) first, none left", d, s.len(), q(4).at)
	}
}

// TestConnStackExpire: expire takes the connections queued before its time, oldest first, and
// their tokens, so that every token left still finds a connection; a token a worker received
// before the expiry finds none (pop says false) rather than another's.
func TestConnStackExpire(t *testing.T) {
	s := newConnStack(4)
	q := func(i int) queuedConn { return queuedConn{at: t0.Add(time.Duration(i) * time.Second)} }
	for i := range 4 {
		s.push(q(i))
	}
	<-s.ready // a worker took a token, and has not popped yet
	old := s.expire(q(2).at)
	if len(old) != 2 || !old[0].at.Equal(q(0).at) || !old[1].at.Equal(q(1).at) {
		t.Fatalf("expire before %v took %v; want the connections of 0 and 1", q(2).at, old)
	}
	if got := s.expire(q(2).at); len(got) != 0 {
		t.Errorf("expire again took %v; want none", got)
	}
	if s.len() != 2 || len(s.ready) != 1 {
		t.Fatalf("after expire: %d queued, %d tokens; want 2 and 1 (the worker holds the other)", s.len(), len(s.ready))
	}
	for _, want := range []int{3, 2} { // the worker's token, then the one left
		if want == 2 {
			<-s.ready
		}
		if got, ok := s.pop(); !ok || !got.at.Equal(q(want).at) {
			t.Errorf("pop = %v, %v; want %v", got.at, ok, q(want).at)
		}
	}
	// Expired while a worker holds the token of the last one: its pop finds the queue empty.
	s.push(q(5))
	<-s.ready
	if got := s.expire(q(6).at); len(got) != 1 {
		t.Fatalf("expire took %d connections, want 1", len(got))
	}
	if got, ok := s.pop(); ok {
		t.Errorf("pop after the connection expired = %v, true", got.at)
	}

	// Two workers received tokens of connections that expire with a third; the two pushed next
	// are theirs to pop, and no token is left over, which would fill ready under lasting load
	// and block push (the review's sequence).
	for i := 10; i < 13; i++ {
		s.push(q(i))
	}
	<-s.ready
	<-s.ready
	s.push(q(13))
	if got := s.expire(q(13).at); len(got) != 3 {
		t.Fatalf("expire took %d connections, want 3", len(got))
	}
	s.push(q(14))
	for _, want := range []int{14, 13} {
		if got, ok := s.pop(); !ok || !got.at.Equal(q(want).at) {
			t.Errorf("pop = %v, %v; want %v", got.at, ok, q(want).at)
		}
	}
	if len(s.ready) != 0 || s.len() != 0 {
		t.Errorf("%d tokens left for %d connections queued; want none", len(s.ready), s.len())
	}
}

// TestExpiredConnectionsClosed: while the only worker is held, connections that waited in the
// queue longer than the handshake timeout are closed as the next one is accepted, not left
// holding their files until a worker reaches them (newest first, under lasting overload, it
// would not).
func TestExpiredConnectionsClosed(t *testing.T) {
	s, l, logs, _, _ := holdOnlyWorker(t, 300*time.Millisecond)
	stale := dialStalled(t, s.Addr(), 5)
	waitUntil(t, "5 connections queued", func() bool { return l.queue.len() == 5 })
	time.Sleep(400 * time.Millisecond) // longer than the handshake timeout
	dialStalled(t, s.Addr(), 1)
	for i, c := range stale {
		if err := readUntilClosed(c, time.Now().Add(2*time.Second)); err != nil {
			t.Errorf("expired connection %d: %v", i, err)
		}
	}
	if n := l.queue.len(); n != 1 {
		t.Errorf("%d connections queued, want the new one only", n)
	}
	logs.waitFor(t, "http: TLS handshake error from "+stale[0].LocalAddr().String(), "not started: waited", "longer than the handshake timeout 300ms")
}

// TestHandshakeListenerClose: Close while one connection is being handshaken and 19 wait in
// the queue closes them all, makes a pending and every later Accept return net.ErrClosed, stops
// the port, and returns once the handshake, the accept loop and the worker have ended. (Its
// worker, woken by Close, may take and close some of the queued connections, so 19 of them:
// with its own draining of the queue removed, Close leaves one open all but once in 2^19.)
func TestHandshakeListenerClose(t *testing.T) {
	p := newPKI(t)
	s, l, _ := listenHandshakes(t, p, ServerOptions{MaxHandshakes: 1, handshakeTimeout: 5 * time.Second, helloTimeout: 5 * time.Second})
	stalled := dialStalled(t, s.Addr(), 20)
	waitUntil(t, "1 handshake in progress and 19 queued", func() bool { return s.handshaking.Load() == 1 && l.queue.len() == 19 })
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		accepted <- err
	}()

	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n, g := s.handshaking.Load(), listenerGoroutines(); n != 0 || g != 0 {
		t.Errorf("once Close returned, %d handshakes are in progress and %d of the listener's goroutines run, want none", n, g)
	}
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Errorf("pending Accept returned %v, want net.ErrClosed", err)
	}
	by := time.Now().Add(3 * time.Second)
	for i, conn := range stalled {
		if err := readUntilClosed(conn, by); err != nil {
			t.Errorf("connection %d of 20: %v", i+1, err)
		}
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close returned %v, want net.ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if conn, err := net.Dial("tcp", s.Addr()); err == nil {
		conn.Close()
		t.Error("the port still accepts connections after Close")
	}
}

// holdOnlyWorker listens with one handshake worker and the handshake timeout, and holds that
// worker with a connection it handshook and nobody accepts yet (first, closed when the test
// ends), dialled with config, an agent's.
func holdOnlyWorker(t *testing.T, timeout time.Duration) (s *Server, l *handshakeListener, logs *logLines, config *tls.Config, first *tls.Conn) {
	t.Helper()
	p := newPKI(t)
	s, l, logs = listenHandshakes(t, p, ServerOptions{MaxHandshakes: 1, handshakeTimeout: timeout})
	config = agentTLSConfig(t, p)
	first, err := dialAgent(s.Addr(), config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Close() })
	return s, l, logs, config, first
}

// listenHandshakes opens the port of a Server that is not started, and returns the listener
// Start would serve, and the server's logs.
func listenHandshakes(t *testing.T, p *testPKI, opts ServerOptions) (*Server, *handshakeListener, *logLines) {
	t.Helper()
	logs := &logLines{}
	opts.Addr, opts.CertFile, opts.KeyFile, opts.CAFile = "127.0.0.1:0", p.certFile, p.keyFile, p.caFile
	opts.Logger, opts.NoDatagrams = logs.logger(), true
	s, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	l := s.handshakeListener()
	t.Cleanup(func() { _ = l.Close() })
	return s, l, logs
}

// dialStalled opens n connections to addr that send nothing, closed when the test ends.
func dialStalled(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns[i] = conn
	}
	return conns
}

// dialAgent opens a connection to addr and completes its handshake with config.
func dialAgent(addr string, config *tls.Config) (*tls.Conn, error) {
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	conn, err := agentHandshake(raw, config)
	if err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// agentHandshake completes a client handshake over raw with config, within 5 s.
func agentHandshake(raw net.Conn, config *tls.Config) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn := tls.Client(raw, config)
	return conn, conn.HandshakeContext(ctx)
}

// agentTLSConfig is an agent's client configuration, with a certificate for node n1.
func agentTLSConfig(t *testing.T, p *testPKI) *tls.Config {
	t.Helper()
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.ca.CertPEM())
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{loadPair(t, certFile, keyFile)}, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
}

// slowAgentTLSConfig is agentTLSConfig's, its certificate sent only after delay: the agent
// stalls its handshake after its ClientHello.
func slowAgentTLSConfig(t *testing.T, p *testPKI, delay time.Duration) *tls.Config {
	t.Helper()
	config := agentTLSConfig(t, p)
	cert := config.Certificates[0]
	config.Certificates = nil
	config.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		time.Sleep(delay)
		return &cert, nil
	}
	return config
}

// acceptHandshaken accepts from l, which must return a handshaken *tls.Conn within 2 s (its
// handshake is done or under way), and closes it. A TLS 1.3 client's handshake ends before
// the server's does, so a client's success alone does not show the server's.
func acceptHandshaken(t *testing.T, l *handshakeListener) {
	t.Helper()
	got := make(chan acceptResult, 1)
	go func() {
		conn, err := l.Accept()
		got <- acceptResult{conn: conn, err: err}
	}()
	var a acceptResult
	select {
	case a = <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("no handshaken connection to accept within 2s")
	}
	if a.err != nil {
		t.Fatalf("Accept: %v", a.err)
	}
	defer a.conn.Close()
	if tc, ok := a.conn.(*tls.Conn); !ok || !tc.ConnectionState().HandshakeComplete {
		t.Fatalf("Accept returned a %T without a complete handshake", a.conn)
	}
}

// readUntilClosed reads from conn, which sent nothing, until the server closes it, at the
// latest by the deadline.
func readUntilClosed(conn net.Conn, by time.Time) error {
	if err := conn.SetReadDeadline(by); err != nil {
		return err
	}
	_, err := conn.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case err == nil:
		return errors.New("the server sent data instead of closing the connection")
	case errors.As(err, &ne) && ne.Timeout():
		return errors.New("the server did not close the connection in time")
	}
	return nil
}

// listenerGoroutines counts the goroutines running a handshakeListener's accept loop or workers.
func listenerGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "(*handshakeListener).acceptLoop") || strings.Contains(g, "(*handshakeListener).work") {
			n++
		}
	}
	return n
}

// waitUntil waits up to 5 s for cond.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 5s", what)
		}
	}
}

// TestHandshakeWaitsBrieflyForHello: a connection that sends nothing holds its worker for the
// hello timeout, not the handshake's, and the failure says so; once a ClientHello came, the
// handshake has the rest of its own timeout (an agent slower than the hello timeout to send its
// certificate still gets through). Without the hello deadline the stalled connection would hold
// the worker for 5 s (the test gives up at 2 s); with the deadline left on after the
// ClientHello, the slow agent's handshake would fail.
func TestHandshakeWaitsBrieflyForHello(t *testing.T) {
	p := newPKI(t)
	s, l, logs := listenHandshakes(t, p, ServerOptions{MaxHandshakes: 1, handshakeTimeout: 5 * time.Second, helloTimeout: 200 * time.Millisecond})
	start := time.Now()
	stalled := dialStalled(t, s.Addr(), 1)[0]
	if err := readUntilClosed(stalled, start.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("a connection that sent nothing was closed after %s, want the hello timeout, 200ms", took)
	}
	logs.waitFor(t, "http: TLS handshake error from "+stalled.LocalAddr().String(), "no ClientHello within 200ms")

	config := slowAgentTLSConfig(t, p, 500*time.Millisecond) // the server waits for its certificate past its hello timeout
	slow, err := dialAgent(s.Addr(), config)
	if err != nil {
		t.Fatalf("an agent 500ms slow to send its certificate, after its ClientHello: %v", err)
	}
	defer slow.Close()
	acceptHandshaken(t, l)
}
