package channel

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// handshakeQueueLen bounds the accepted connections waiting for a handshake worker: as many as
// Linux's default accept backlog (net.core.somaxconn, 4096), so that a restart's few thousand
// reconnecting agents wait in the queue, where their wait is measured (see handshakeListener),
// rather than in the kernel's backlog, where it is not. A connection accepted while the queue
// is full takes the place of the one that waited longest, which is closed. A waiting
// connection costs a file, which MaxConns counts, and a few hundred bytes, no goroutine. With a
// MaxConns below the queue's length and the workers, the queue never fills: the listener stops
// accepting at MaxConns, and the connections beyond wait in the kernel's backlog, oldest first.
const handshakeQueueLen = 4096

// handshakeListener completes the TLS server handshakes of its inner listener's connections in
// a fixed pool of workers, and accepts the handshaken *tls.Conns. http.Server's ServeTLS runs
// every handshake at once, in its connection's goroutine: the processors bound how many
// handshakes complete a second (a worker's waits for its agent aside, which DefaultMaxHandshakes
// covers), so when thousands of agents reconnect together (a controller restart) that completes
// none sooner, it only holds thousands of handshakes' state in memory (a third of the heap at
// 5000 nodes) and makes every one slow instead of the early ones fast.
//
// One goroutine accepts connections into a queue (a waiting connection holds no goroutine), and
// the workers take them newest first. Under more load than the processors can handshake, the
// newest connections are the ones whose agents still wait: an agent gives up on a handshake after
// its timeout and connects again for its next heartbeat, so a queue served oldest first spends
// every handshake on a connection its agent already closed (it reads the ClientHello the agent
// sent at its connect, does the key exchange and signs, then reads the close), the next
// connections wait as long, and no agent gets through while the load lasts. At 5000 agents
// connecting at a controller's start on a busy machine, that was at least 54 496 handshakes failed
// with EOF in 10 minutes and 51 384 of 59 359 heartbeats failed; newest first, the queue is worked
// down while it lasts, and each agent that gets through sends datagrams from then on, so the load
// falls. When the load is less, the queue is empty whenever a worker looks, and the order is no
// matter. A handshake has the timeout, counted from when its worker starts it, so that a
// connection stalling its handshake holds a worker that long at most. A connection that waited
// longer than the timeout for a worker is closed without a handshake when a worker takes it, or
// when the next connection is accepted, or when a newer one takes its place in a full queue: an
// agent gives up on its handshake after its Client's Timeout (the transport's TLSHandshakeTimeout:
// palisade-agent's heartbeat interval, 1 s by default; the Client's own default is 5 s), counted
// from its TCP connect, so including its time in the kernel's backlog and in the queue. After the
// timeout (the server's ReadHeaderTimeout, 10 s) in the queue, the agents at their defaults have
// given up, and a handshake would be wasted on a closed connection; an agent with a longer
// interval reconnects for its next heartbeat. Connections given up on sooner are still handshaken:
// the server cannot tell an agent's timeout before its handshake.
//
// A worker waits at most helloTimeout for the connection's ClientHello, then the rest of the
// timeout for the handshake's end. An agent sends its ClientHello as soon as it connects, so a
// connection that waited in the queue has it already; without this shorter wait, MaxHandshakes
// connections that send nothing (anyone who reaches the port can open them) would hold every
// worker for the whole timeout, again and again, and no agent would get through.
type handshakeListener struct {
	net.Listener // the inner listener; Addr is its own
	config       *tls.Config
	timeout      time.Duration
	helloTimeout time.Duration
	// errorLog gets the failed handshakes, in the words of http.Server, which logged them
	// before.
	errorLog *stdlog.Logger
	// busy counts the handshakes in progress.
	busy *atomic.Int64

	queue    connStack
	accepted chan acceptResult // unbuffered: a worker hands over when Accept is called
	// ctx is cancelled by Close: it stops the accept loop and the workers and aborts the
	// handshakes in progress (HandshakeContext closes their connections).
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// queuedConn is an accepted connection waiting for a worker since at.
type queuedConn struct {
	conn net.Conn
	at   time.Time
}

// acceptResult is what Accept returns: a handshaken connection, or the inner listener's error.
type acceptResult struct {
	conn net.Conn
	err  error
}

// newHandshakeListener starts accepting inner's connections and handshaking them with config
// in workers goroutines, each handshake within timeout (its ClientHello within hello),
// counting those in progress in busy and logging the failed ones to errorLog. Close stops it.
// config is the listener's own: its GetConfigForClient is wrapped.
func newHandshakeListener(inner net.Listener, config *tls.Config, workers int, timeout, hello time.Duration, errorLog *stdlog.Logger, busy *atomic.Int64) *handshakeListener {
	ctx, cancel := context.WithCancel(context.Background())
	next := config.GetConfigForClient
	config.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		// The ClientHello came: from now on the handshake's own timeout bounds it.
		_ = h.Conn.SetReadDeadline(time.Time{})
		if next == nil {
			return nil, nil
		}
		return next(h)
	}
	l := &handshakeListener{
		Listener: inner, config: config, timeout: timeout, helloTimeout: min(hello, timeout), errorLog: errorLog, busy: busy,
		queue: newConnStack(handshakeQueueLen), accepted: make(chan acceptResult),
		ctx: ctx, cancel: cancel,
	}
	l.wg.Go(l.acceptLoop)
	for range workers {
		l.wg.Go(l.work)
	}
	return l
}

// Accept returns the next handshaken connection, a *tls.Conn, or the inner listener's next
// error: the caller decides whether to retry, as with the inner listener itself (http.Server
// backs off on temporary errors and stops, closing this listener, on others). Once Close was
// called it returns net.ErrClosed, in a *net.OpError as a closed net.Listener does.
func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case a := <-l.accepted:
		return a.conn, a.err
	case <-l.ctx.Done():
		return nil, &net.OpError{Op: "accept", Net: l.Addr().Network(), Addr: l.Addr(), Err: net.ErrClosed}
	}
}

// Close closes the inner listener, stops the accept loop and the workers, and closes the
// connections queued, being handshaken, and handshaken but not accepted. It returns once the
// goroutines have all stopped, and then no connection but the accepted ones is left open.
func (l *handshakeListener) Close() error {
	l.closeOnce.Do(func() {
		l.cancel()
		l.closeErr = l.Listener.Close()
		l.wg.Wait()
		for _, q := range l.queue.drain() {
			_ = q.conn.Close()
		}
	})
	return l.closeErr
}

// acceptLoop queues the inner listener's connections for the workers, closing the one that
// waited longest when the queue is full, and hands its errors to Accept.
func (l *handshakeListener) acceptLoop() {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			if !l.deliver(acceptResult{err: err}) {
				return
			}
			continue
		}
		if l.ctx.Err() != nil {
			_ = conn.Close()
			return
		}
		now := time.Now()
		if old, full := l.queue.push(queuedConn{conn: conn, at: now}); full {
			l.fail(old.conn, fmt.Errorf("not started: %d connections waited for a handshake worker, and it had waited longest (%s)",
				handshakeQueueLen, now.Sub(old.at).Round(time.Millisecond)))
		}
		for _, old := range l.queue.expire(now.Add(-l.timeout)) {
			l.fail(old.conn, fmt.Errorf("not started: waited %s for a handshake worker, longer than the handshake timeout %s",
				now.Sub(old.at).Round(time.Millisecond), l.timeout))
		}
	}
}

// work handshakes queued connections, newest first, and hands them to Accept until Close.
func (l *handshakeListener) work() {
	for {
		select {
		case <-l.queue.ready:
			q, ok := l.queue.pop()
			if !ok {
				continue // its connection expired (connStack.expire)
			}
			if conn := l.handshake(q); conn != nil && !l.deliver(acceptResult{conn: conn}) {
				_ = conn.Close()
			}
		case <-l.ctx.Done():
			return
		}
	}
}

// connStack is the queue of connections waiting for a handshake worker, taken newest first
// (see handshakeListener): a ring of its size. ready holds a token per connection queued: a
// worker that receives one pops a connection. The tokens out (in ready, or received and not yet
// popped) are always n + owed: expire takes back what it can of its connections' tokens from
// ready, and owes the rest (received by workers meanwhile); the next pushes send no token while
// anything is owed, and a pop that finds the queue empty pays one back. So no queued connection
// lacks a token, and ready never holds more tokens than its capacity (push never blocks).
type connStack struct {
	ready chan struct{}
	mu    sync.Mutex
	ring  []queuedConn
	first int // the oldest's index in ring
	n     int // how many are queued
	owed  int // tokens out beyond n (see above)
}

func newConnStack(size int) connStack {
	return connStack{ready: make(chan struct{}, size), ring: make([]queuedConn, size)}
}

// push queues q; when the queue is full, q takes the place of the connection that waited
// longest, which push returns (full) for the caller to close.
func (s *connStack) push(q queuedConn) (old queuedConn, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == len(s.ring) {
		old, s.ring[s.first] = s.ring[s.first], q
		s.first = (s.first + 1) % len(s.ring)
		return old, true // as many connections as before: no token added
	}
	s.ring[(s.first+s.n)%len(s.ring)] = q
	s.n++
	if s.owed > 0 {
		s.owed-- // a token already out, one expire could not take back, stands for q
	} else {
		s.ready <- struct{}{}
	}
	return queuedConn{}, false
}

// pop takes the newest connection; call it once per token received from ready. It says false
// when the token's connection was taken by expire meanwhile.
func (s *connStack) pop() (queuedConn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		s.owed = max(s.owed-1, 0) // the token was one expire could not take back
		return queuedConn{}, false
	}
	i := (s.first + s.n - 1) % len(s.ring)
	q := s.ring[i]
	s.ring[i] = queuedConn{}
	s.n--
	return q, true
}

// expire takes the connections queued before before, the oldest ones, for the caller to close:
// under lasting overload the workers, newest first, would not reach them, and each would hold
// its file and its place in the queue until a newer one took it. Their tokens are taken back
// from ready; those workers received meanwhile are owed (see connStack).
func (s *connStack) expire(before time.Time) []queuedConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []queuedConn
	for s.n > 0 && s.ring[s.first].at.Before(before) {
		out = append(out, s.ring[s.first])
		s.ring[s.first] = queuedConn{}
		s.first = (s.first + 1) % len(s.ring)
		s.n--
	}
	for range out {
		select {
		case <-s.ready:
		default:
			s.owed++
		}
	}
	return out
}

// len is how many connections are queued.
func (s *connStack) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// drain takes every queued connection (Close, once the workers stopped).
func (s *connStack) drain() []queuedConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]queuedConn, 0, s.n)
	for ; s.n > 0; s.n-- {
		out = append(out, s.ring[s.first])
		s.ring[s.first] = queuedConn{}
		s.first = (s.first + 1) % len(s.ring)
	}
	return out
}

// deliver hands a to Accept, and says false when the listener was closed first.
func (l *handshakeListener) deliver(a acceptResult) bool {
	select {
	case l.accepted <- a:
		return true
	case <-l.ctx.Done():
		return false
	}
}

// handshake completes q's TLS handshake within the timeout and returns its connection. When it
// fails, or q waited longer than the timeout to start it, it closes q's connection (freeing
// its place under MaxConns) and returns nil.
func (l *handshakeListener) handshake(q queuedConn) *tls.Conn {
	if waited := time.Since(q.at); waited > l.timeout {
		l.fail(q.conn, fmt.Errorf("not started: waited %s for a handshake worker, longer than the handshake timeout %s", waited.Round(time.Millisecond), l.timeout))
		return nil
	}
	l.busy.Add(1)
	defer l.busy.Add(-1)
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	defer cancel()
	// Cleared by the config's GetConfigForClient once the ClientHello is read.
	if err := q.conn.SetReadDeadline(time.Now().Add(l.helloTimeout)); err != nil {
		l.fail(q.conn, err)
		return nil
	}
	conn := tls.Server(q.conn, l.config)
	if err := conn.HandshakeContext(ctx); err != nil {
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded): // the only read deadline is the ClientHello's
			err = fmt.Errorf("no ClientHello within %s: %w", l.helloTimeout, err)
		case errors.Is(err, context.DeadlineExceeded):
			err = fmt.Errorf("not completed within %s: %w", l.timeout, err)
		}
		l.fail(q.conn, err)
		return nil
	}
	return conn
}

// fail closes conn, whose handshake failed with err, and logs it as http.Server did, unless
// the listener is closing.
func (l *handshakeListener) fail(conn net.Conn, err error) {
	_ = conn.Close()
	if l.ctx.Err() == nil {
		l.errorLog.Printf("http: TLS handshake error from %s: %v", conn.RemoteAddr(), err)
	}
}
