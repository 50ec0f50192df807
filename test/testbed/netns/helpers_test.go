package netns_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"palisade.dev/palisade/test/testbed/netns"
)

// dialTimeout keeps the tests quick: every peer is one bridge away.
const dialTimeout = 300 * time.Millisecond

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

// reach connects from n to addr and exchanges one line.
func reach(n *netns.Node, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	c, err := n.Dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return roundTrip(c, dialTimeout)
}

func mustReach(t *testing.T, n *netns.Node, addr, what string) {
	t.Helper()
	if err := reach(n, addr); err != nil {
		t.Errorf("%s: node %s does not reach %s: %v", what, n.Name(), addr, err)
	}
}

func mustNotReach(t *testing.T, n *netns.Node, addr, what string) {
	t.Helper()
	err := reach(n, addr)
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
