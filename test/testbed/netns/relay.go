package netns

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// relayDialTimeout bounds the relay's connection to its target.
const relayDialTimeout = 5 * time.Second

// Relay listens on HostIP at a free port and forwards every TCP connection to target (e.g.
// the test bed's API server on 127.0.0.1), so that processes in node namespaces reach a
// root-namespace service bound to loopback. It is a plain byte relay standing in for the
// network path between a node and that service; the service itself (the real API server)
// is untouched, and TLS runs end to end through the relay. Cut the returned address
// (ParseEndpoint) to cut a node off from the service alone. The relay and its connections
// are closed in t.Cleanup. It returns the address "HostIP:port".
func (l *LAN) Relay(t testing.TB, target string) string {
	t.Helper()
	addr := l.RelayTo(t, target, func() string { return target })
	l.logf("relay %s → %s", addr, target)
	return addr
}

// RelayTo is Relay to a target that may change: every new connection goes to the address
// target returns then, and is closed at once when it returns "". It stands in for a Service
// whose one endpoint moves (the controller's heartbeat Service follows its leader). what
// names the target in errors.
func (l *LAN) RelayTo(t testing.TB, what string, target func() string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(l.HostIP(), "0"))
	if err != nil {
		t.Fatalf("netns: starting relay to %s: %v", what, err)
	}
	r := &relay{ln: ln, target: target, conns: map[net.Conn]bool{}}
	r.wg.Go(r.serve)
	t.Cleanup(r.close)
	return ln.Addr().String()
}

type relay struct {
	ln     net.Listener
	target func() string
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]bool
}

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		if !r.track(c) {
			return
		}
		r.wg.Go(func() { r.forward(c) })
	}
}

// forward copies both ways between c and a new connection to the target until both
// directions have ended, passing half-closes on.
func (r *relay) forward(c net.Conn) {
	defer r.untrack(c)
	target := r.target()
	if target == "" {
		return
	}
	up, err := net.DialTimeout("tcp", target, relayDialTimeout)
	if err != nil {
		return
	}
	if !r.track(up) {
		return
	}
	defer r.untrack(up)
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	wg.Go(func() { pipe(up, c) })
	wg.Go(func() { pipe(c, up) })
	wg.Wait()
}

// track records c for close; it closes c and returns false once the relay is closed.
func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.conns[c] = true
	return true
}

func (r *relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

// close stops accepting, closes every connection and waits for the copies to end.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	r.ln.Close()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
