package netns_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"palisade.dev/palisade/test/testbed/netns"
)

// dialTimeout is how long a check that nothing passes listens for silence: every peer is one
// bridge away, so it keeps the tests quick. A check that something passes waits reachTimeout,
// which it ends as soon as the answer comes: a loaded machine may take longer than
// dialTimeout to answer, and that must not read as a cut.
const (
	dialTimeout  = 300 * time.Millisecond
	reachTimeout = 5 * time.Second
)

// echo serves ln until the test ends: every line it receives is sent back. It returns the
// listener's address.
func echo(t *testing.T, ln net.Listener) string {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// echoIn runs an echo server in n's namespace on n's address.
func echoIn(t *testing.T, n *netns.Node, ip string) string {
	t.Helper()
	ln, err := n.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listening in node %s: %v", n.Name(), err)
	}
	return echo(t, ln)
}

// echoOnHost runs an echo server in the root namespace on ip.
func echoOnHost(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listening on %s: %v", ip, err)
	}
	return echo(t, ln)
}

// roundTrip sends a line over c and expects it back within timeout.
func roundTrip(c net.Conn, timeout time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading: %w", err)
	}
	if line != "ping\n" {
		return fmt.Errorf("read %q, want the echo", line)
	}
	return nil
}

// reach connects from n to addr and exchanges one line, each within timeout.
func reach(n *netns.Node, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := n.Dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return roundTrip(c, timeout)
}

func mustReach(t *testing.T, n *netns.Node, addr, what string) {
	t.Helper()
	if err := reach(n, addr, reachTimeout); err != nil {
		t.Errorf("%s: node %s does not reach %s: %v", what, n.Name(), addr, err)
	}
}

func mustNotReach(t *testing.T, n *netns.Node, addr, what string) {
	t.Helper()
	err := reach(n, addr, dialTimeout)
	if err == nil {
		t.Errorf("%s: node %s still reaches %s", what, n.Name(), addr)
		return
	}
	if !isTimeout(err) {
		t.Errorf("%s: node %s → %s failed with %v, want a timeout (packets dropped, not rejected)", what, n.Name(), addr, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// udpOnHost listens for datagrams in the root namespace on ip:port (port 0: any free one).
func udpOnHost(t *testing.T, ip string, port int) (net.PacketConn, error) {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { pc.Close() })
	return pc, nil
}

// tcpAndUDPOnHost serves TCP (echo) and takes datagrams on one port number of ip in the root
// namespace, as the controller does for heartbeats. It returns the datagram socket and the
// TCP echo server's address.
func tcpAndUDPOnHost(t *testing.T, ip string) (net.PacketConn, string) {
	t.Helper()
	for range 10 {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		pc, err := udpOnHost(t, ip, ln.Addr().(*net.TCPAddr).Port)
		if errors.Is(err, syscall.EADDRINUSE) { // the port is free for TCP only: try another
			ln.Close()
			continue
		}
		if err != nil {
			ln.Close()
			t.Fatal(err)
		}
		return pc, echo(t, ln)
	}
	t.Fatalf("found no port of %s free for both TCP and UDP", ip)
	return nil, ""
}

// dialUDP returns a UDP socket in n's namespace connected to srv.
func dialUDP(t *testing.T, n *netns.Node, srv net.PacketConn) net.Conn {
	t.Helper()
	c, err := n.Dial(t.Context(), "udp", srv.LocalAddr().String())
	if err != nil {
		t.Fatalf("dialing %s over UDP from node %s: %v", srv.LocalAddr(), n.Name(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var datagramSeq atomic.Int64

// datagram is a payload no earlier call returned, so that a late copy of an earlier datagram
// cannot pass for this one.
func datagram() []byte {
	return []byte("datagram " + strconv.FormatInt(datagramSeq.Add(1), 10))
}

// sendUp sends a datagram from c, in a node's namespace, to srv in the root namespace and
// waits up to timeout for srv to receive it.
func sendUp(c net.Conn, srv net.PacketConn, timeout time.Duration) error {
	msg := datagram()
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("sending: %w", err)
	}
	return await(srv.SetReadDeadline, func(b []byte) (int, error) {
		n, _, err := srv.ReadFrom(b)
		return n, err
	}, msg, timeout)
}

// sendDown sends a datagram from srv, in the root namespace, to c in a node's namespace (from
// the port c is connected to) and waits up to timeout for c to receive it.
func sendDown(srv net.PacketConn, c net.Conn, timeout time.Duration) error {
	msg := datagram()
	if _, err := srv.WriteTo(msg, c.LocalAddr()); err != nil {
		return fmt.Errorf("sending: %w", err)
	}
	return await(c.SetReadDeadline, c.Read, msg, timeout)
}

// await reads datagrams until want arrives or timeout passes.
func await(setDeadline func(time.Time) error, read func([]byte) (int, error), want []byte, timeout time.Duration) error {
	if err := setDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	buf := make([]byte, 64)
	for {
		n, err := read(buf)
		if err != nil {
			return fmt.Errorf("receiving: %w", err)
		}
		if bytes.Equal(buf[:n], want) {
			return nil
		}
	}
}

func endpoint(t *testing.T, addr string) netns.Endpoint {
	t.Helper()
	e, err := netns.ParseEndpoint(addr)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// names lists the namespaces and root-namespace links of the LAN with prefix.
func names(t *testing.T, prefix string) []string {
	t.Helper()
	var found []string
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifaces {
		if ofLAN(i.Name, prefix) {
			found = append(found, "link "+i.Name)
		}
	}
	for _, ns := range netnsList(t) {
		if ofLAN(ns, prefix) {
			found = append(found, "namespace "+ns)
		}
	}
	return found
}

func ofLAN(name, prefix string) bool {
	return name == prefix+"h" || strings.HasPrefix(name, prefix+"-")
}

// netnsList is `ip netns list`, names only.
func netnsList(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("listing namespaces: %v", err)
	}
	var list []string
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 {
			list = append(list, f[0])
		}
	}
	return list
}
