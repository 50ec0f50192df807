package netns

import (
	"errors"
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
//
// The relay forwards UDP datagrams too, on the same port number, to the target's UDP port of
// the same number as its TCP one, as a Service with a UDP port does (the agents' heartbeat
// datagrams): each client's datagrams go out from a socket of their own, so the target's
// answers come back to that client. A cut of the address drops both.
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
	ln, pc, err := listenBoth(l.HostIP())
	if err != nil {
		t.Fatalf("netns: starting relay to %s: %v", what, err)
	}
	r := &relay{ln: ln, udp: pc, target: target, conns: map[net.Conn]bool{}, sessions: map[string]*udpSession{}}
	r.wg.Go(r.serve)
	r.wg.Go(r.serveDatagrams)
	t.Cleanup(r.close)
	return ln.Addr().String()
}

// listenBoth listens on host at a free TCP port and on the UDP port of the same number.
func listenBoth(host string) (net.Listener, *net.UDPConn, error) {
	var err error
	for range 20 { // the UDP port of a free TCP port is rarely taken; try another one if it is
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			return nil, nil, err
		}
		var pc *net.UDPConn
		if pc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ln.Addr().(*net.TCPAddr).AddrPort())); err == nil {
			return ln, pc, nil
		}
		ln.Close()
	}
	return nil, nil, err
}

type relay struct {
	ln     net.Listener
	udp    *net.UDPConn
	target func() string
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	conns    map[net.Conn]bool
	sessions map[string]*udpSession // by client address
}

// udpSession is one client's datagram path: its socket to the target, and the target it goes to.
type udpSession struct {
	target string
	up     *net.UDPConn
}

// serveDatagrams forwards each datagram to the current target from its client's session.
func (r *relay) serveDatagrams() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.udp.ReadFromUDP(buf)
		if err != nil {
			return // closed
		}
		target := r.target()
		if target == "" {
			continue
		}
		if up := r.session(from, target); up != nil {
			_, _ = up.Write(buf[:n])
		}
	}
}

// session is the socket from's datagrams go out from to target: the one it has, or a new one
// when it has none or had another target (the leader moved); nil once the relay is closed or
// when target cannot be dialed. A new socket's answers are copied back to from.
func (r *relay) session(from *net.UDPAddr, target string) *net.UDPConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	key := from.String()
	if s := r.sessions[key]; s != nil {
		if s.target == target {
			return s.up
		}
		s.up.Close() // its copy back ends
		delete(r.conns, s.up)
	}
	delete(r.sessions, key)
	addr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil
	}
	up, err := net.DialUDP("udp", nil, addr)
	if err != nil {
		return nil
	}
	r.sessions[key] = &udpSession{target: target, up: up}
	r.conns[up] = true
	r.wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue // an ICMP error (nobody listening yet): the next datagram tries again
			}
			_, _ = r.udp.WriteToUDP(buf[:n], from)
		}
	})
	return up
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
	r.udp.Close()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
