package netns_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/test/testbed/netns"
)

// A root-namespace server cut by its port while another port of the same address stays
// reachable; Heal restores it. A process started with Command sees the same.
func TestCutEndpointByPort(t *testing.T) {
	t.Parallel()
	lan := netns.New(t)
	a := lan.AddNode("a")
	cutAddr := serveHTTP(t, lan.HostIP(), "hello")
	otherAddr := echoOnHost(t, lan.HostIP())

	if got, err := wget(t, a, cutAddr); err != nil || got != "hello" {
		t.Fatalf("wget from node a before the cut: %q, %v", got, err)
	}
	mustReach(t, a, otherAddr, "before the cut")

	must(t, a.Cut(endpoint(t, cutAddr)))
	if got, err := wget(t, a, cutAddr); err == nil {
		t.Errorf("wget from node a reached the cut server: %q", got)
	}
	mustNotReach(t, a, cutAddr, "after the cut")
	mustReach(t, a, otherAddr, "another port of the cut address")

	must(t, a.Heal())
	if got, err := wget(t, a, cutAddr); err != nil || got != "hello" {
		t.Errorf("wget from node a after Heal: %q, %v", got, err)
	}
	mustReach(t, a, otherAddr, "after Heal")
}

// A cut of an endpoint with a port stops UDP on that port as well as TCP, in both directions:
// the controller takes the agents' heartbeats as datagrams on the port number of its TCP
// heartbeat server, and a partition from the controller must silence both. Another UDP port
// of the same address still passes; Heal restores the cut port.
func TestCutEndpointDropsUDP(t *testing.T) {
	t.Parallel()
	lan := netns.New(t)
	a := lan.AddNode("a")
	hb, hbTCP := tcpAndUDPOnHost(t, lan.HostIP())
	other, err := udpOnHost(t, lan.HostIP(), 0)
	must(t, err)
	toHB, toOther := dialUDP(t, a, hb), dialUDP(t, a, other)

	for what, err := range map[string]error{
		"node → host":       sendUp(toHB, hb, reachTimeout),
		"host → node":       sendDown(hb, toHB, reachTimeout),
		"node → other port": sendUp(toOther, other, reachTimeout),
	} {
		if err != nil {
			t.Fatalf("datagram %s before the cut: %v", what, err)
		}
	}
	mustReach(t, a, hbTCP, "TCP before the cut")

	must(t, a.Cut(endpoint(t, hbTCP)))
	// The node's own sends fail at once with EPERM, as Cut documents (the output hook's drop).
	if err := sendUp(toHB, hb, dialTimeout); !errors.Is(err, syscall.EPERM) {
		t.Errorf("datagram node → host after the cut: %v, want EPERM (dropped before it leaves the node)", err)
	}
	if err := sendDown(hb, toHB, dialTimeout); err == nil {
		t.Error("datagram host → node after the cut: delivered")
	} else if !isTimeout(err) {
		t.Errorf("datagram host → node after the cut: %v, want silence (a timeout)", err)
	}
	if err := sendUp(toOther, other, reachTimeout); err != nil {
		t.Errorf("datagram node → another UDP port of the cut address: %v", err)
	}
	if err := sendDown(other, toOther, reachTimeout); err != nil {
		t.Errorf("datagram from another UDP port of the cut address → node: %v", err)
	}
	mustNotReach(t, a, hbTCP, "TCP on the cut port")

	must(t, a.Heal())
	if err := sendUp(toHB, hb, reachTimeout); err != nil {
		t.Errorf("datagram node → host after Heal: %v", err)
	}
	if err := sendDown(hb, toHB, reachTimeout); err != nil {
		t.Errorf("datagram host → node after Heal: %v", err)
	}
	mustReach(t, a, hbTCP, "TCP after Heal")
}

// nft takes the rules of an IPv6 peer (which TestRuleset checks only as text).
func TestCutIPv6Endpoint(t *testing.T) {
	t.Parallel()
	a := netns.New(t).AddNode("a")
	must(t, a.Cut(netns.Endpoint{IP: "fd00::1", Port: 80}, netns.Endpoint{IP: "fd00::2"}))
	must(t, a.Heal())
}

// CutNodes separates two nodes in both directions while both keep the root namespace and the
// third node.
func TestCutNodes(t *testing.T) {
	t.Parallel()
	lan := netns.New(t)
	a, b, c := lan.AddNode("a"), lan.AddNode("b"), lan.AddNode("c")
	atA, atB, atC := echoIn(t, a, a.IP()), echoIn(t, b, b.IP()), echoIn(t, c, c.IP())
	host := echoOnHost(t, lan.HostIP())
	mustReach(t, a, atB, "before the cut")
	mustReach(t, b, atA, "before the cut")

	must(t, a.CutNodes(b))
	mustNotReach(t, a, atB, "a → b after a.CutNodes(b)")
	mustNotReach(t, b, atA, "b → a after a.CutNodes(b)")
	mustReach(t, a, atC, "a → c")
	mustReach(t, c, atB, "c → b")
	mustReach(t, a, host, "a → root")
	mustReach(t, b, host, "b → root")

	must(t, lan.Heal())
	mustReach(t, a, atB, "after Heal")
	mustReach(t, b, atA, "after Heal")
}

// Uncut takes back one cut and leaves the others: two faults on one node (a cut from the host
// and one from a peer) heal one at a time, and an endpoint cut twice stays cut until both are
// taken back. Taking back a cut never made is an error.
func TestUncutLeavesTheOtherCuts(t *testing.T) {
	t.Parallel()
	lan := netns.New(t)
	a, b := lan.AddNode("a"), lan.AddNode("b")
	atB := echoIn(t, b, b.IP())
	host := echoOnHost(t, lan.HostIP())
	hostIP := netns.Endpoint{IP: lan.HostIP()}

	must(t, a.Cut(hostIP))
	must(t, a.CutNodes(b))
	must(t, a.UncutNodes(b))
	mustReach(t, a, atB, "a → b after its cut was taken back")
	mustNotReach(t, a, host, "a → root while its own cut stays")

	must(t, a.Cut(hostIP)) // a second fault on the same endpoint
	must(t, a.Uncut(hostIP))
	mustNotReach(t, a, host, "a → root, cut twice and taken back once")
	must(t, a.Uncut(hostIP))
	mustReach(t, a, host, "a → root, both cuts taken back")
	if err := a.Uncut(hostIP); err == nil {
		t.Error("Uncut of an endpoint not cut: no error")
	}
}

// CutAll leaves only loopback.
func TestCutAll(t *testing.T) {
	t.Parallel()
	lan := netns.New(t)
	a, b := lan.AddNode("a"), lan.AddNode("b")
	host := echoOnHost(t, lan.HostIP())
	atB, atA := echoIn(t, b, b.IP()), echoIn(t, a, a.IP())
	loop := echoIn(t, a, "127.0.0.1")

	must(t, a.CutAll())
	mustNotReach(t, a, host, "a → root")
	mustNotReach(t, a, atB, "a → b")
	mustNotReach(t, b, atA, "b → a")
	mustReach(t, a, loop, "a → its loopback")
	mustReach(t, a, atA, "a → its own address")
	mustReach(t, b, host, "b → root")

	must(t, a.Heal())
	mustReach(t, a, host, "after Heal")
	mustReach(t, b, atA, "after Heal")
}

// An open connection through the relay stops passing data when the relay's endpoint is cut,
// without being reset: after Heal the same connection delivers what was sent meanwhile.
func TestCutEstablishedConnectionThroughRelay(t *testing.T) {
	t.Parallel()
	lan := netns.New(t)
	a := lan.AddNode("a")
	relay := lan.Relay(t, echoOnHost(t, "127.0.0.1"))
	if !strings.HasPrefix(relay, lan.HostIP()+":") {
		t.Fatalf("relay listens on %s, want %s:<port>", relay, lan.HostIP())
	}
	ctx, cancel := context.WithTimeout(t.Context(), reachTimeout)
	defer cancel()
	conn, err := a.Dial(ctx, "tcp", relay)
	if err != nil {
		t.Fatalf("dialing the relay from node a: %v", err)
	}
	defer conn.Close()
	must(t, roundTrip(conn, time.Second))

	must(t, a.Cut(endpoint(t, relay)))
	err = roundTrip(conn, 500*time.Millisecond)
	if err == nil {
		t.Fatal("the established connection still passes data after the cut")
	}
	if !isTimeout(err) {
		t.Fatalf("the established connection failed with %v, want silence (a timeout)", err)
	}
	mustNotReach(t, a, relay, "new connection after the cut")

	must(t, a.Heal())
	// The line written during the cut is retransmitted; then a new one goes through.
	must(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, len("ping\n"))
	if _, err := io.ReadFull(conn, buf); err != nil {
		t.Fatalf("reading what was sent during the cut, after Heal: %v", err)
	}
	if err := roundTrip(conn, 5*time.Second); err != nil {
		t.Errorf("the connection after Heal: %v", err)
	}
}

// Everything a LAN made is gone after its test, processes left in a node namespace included.
func TestCleanupRemovesEverything(t *testing.T) {
	var prefix, hostIP string
	var sleeper *exec.Cmd
	t.Run("lan", func(t *testing.T) {
		lan := netns.New(t)
		prefix, hostIP = lan.Prefix(), lan.HostIP()
		a, b := lan.AddNode("a"), lan.AddNode("b")
		lan.Relay(t, echoOnHost(t, "127.0.0.1"))
		must(t, a.CutNodes(b))
		must(t, b.CutAll())
		sleeper = a.Command(context.Background(), "/bin/busybox", "sleep", "60")
		must(t, sleeper.Start())
		want := []string{"link " + prefix + "h", "namespace " + prefix + "-lan", "namespace " + prefix + "-n0", "namespace " + prefix + "-n1"}
		if diff := cmp.Diff(want, sortedNames(t, prefix)); diff != "" {
			t.Errorf("namespaces and links while the LAN exists (-want +got):\n%s", diff)
		}
	})
	if left := names(t, prefix); len(left) > 0 {
		t.Errorf("left after cleanup: %v", left)
	}
	if hostHas(t, hostIP) {
		t.Errorf("the root namespace still has address %s", hostIP)
	}
	err := sleeper.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the process left in node a's namespace ended with %v, want killed by cleanup", err)
	}
}

// New removes the namespaces and links of a process that no longer exists, and only those.
func TestNewRemovesLeftoversOfDeadRuns(t *testing.T) {
	dead := deadPID(t)
	prefix := "pn" + strconv.FormatInt(int64(dead), 36) + "-0"
	lanNS, nodeNS, link := prefix+"-lan", prefix+"-n0", prefix+"h"
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "delete", link).Run()
		_ = exec.Command("ip", "netns", "delete", nodeNS).Run()
		_ = exec.Command("ip", "netns", "delete", lanNS).Run()
	})
	for _, args := range [][]string{
		{"netns", "add", lanNS},
		{"netns", "add", nodeNS},
		{"link", "add", link, "type", "veth", "peer", "name", "host", "netns", lanNS},
		{"-n", lanNS, "link", "add", "n0", "type", "veth", "peer", "name", "eth0", "netns", nodeNS},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("making a leftover: ip %v: %v: %s", args, err, out)
		}
	}
	alive := netns.New(t) // a live LAN of this process must survive the next New
	netns.New(t)
	if left := names(t, prefix); len(left) > 0 {
		t.Errorf("leftovers of dead process %d still there: %v", dead, left)
	}
	if got := names(t, alive.Prefix()); len(got) != 2 {
		t.Errorf("the live LAN %s lost its namespace or link: %v", alive.Prefix(), got)
	}
}

func TestParseEndpoint(t *testing.T) {
	for in, want := range map[string]netns.Endpoint{
		"10.231.0.1:6443": {IP: "10.231.0.1", Port: 6443},
		"10.231.0.11":     {IP: "10.231.0.11"},
		"[fd00::1]:80":    {IP: "fd00::1", Port: 80},
	} {
		got, err := netns.ParseEndpoint(in)
		if err != nil || got != want {
			t.Errorf("ParseEndpoint(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"localhost:80", "10.231.0.1:x", ""} {
		if _, err := netns.ParseEndpoint(in); err == nil {
			t.Errorf("ParseEndpoint(%q) succeeded", in)
		}
	}
}

// serveHTTP serves body over HTTP on ip until the test ends.
func serveHTTP(t *testing.T, ip, body string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// wget fetches http://addr/ from inside n with busybox wget, killed after 1s (busybox-static's
// own -T option crashes it).
func wget(t *testing.T, n *netns.Node, addr string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	out, err := n.Command(ctx, "/bin/busybox", "wget", "-q", "-O", "-", "http://"+addr+"/").Output()
	return string(out), err
}

func sortedNames(t *testing.T, prefix string) []string {
	got := names(t, prefix)
	slices.Sort(got)
	return got
}

func hostHas(t *testing.T, ip string) bool {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.String() == ip {
			return true
		}
	}
	return false
}

// deadPID is a process ID no process can have: above the kernel's pid_max.
func deadPID(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return max + 1
}

// The relay forwards datagrams too, as a Service with a UDP port does: a node's datagram to the
// relay's address reaches the target's UDP port of the same number as its TCP one, and the
// target's answer comes back to the node. When the target moves (a new leader) the next datagram
// goes to the new one; a cut of the relay's address drops datagrams as it does connections.
func TestRelayForwardsDatagrams(t *testing.T) {
	t.Parallel()
	lan := netns.New(t)
	a := lan.AddNode("a")
	first, second := udpAnswerer(t, "first"), udpAnswerer(t, "second")
	var mu sync.Mutex
	target := first
	relay := lan.RelayTo(t, "the answerers", func() string {
		mu.Lock()
		defer mu.Unlock()
		return target
	})
	c, err := a.Dial(t.Context(), "udp", relay)
	must(t, err)
	defer c.Close()
	ask := func(want string, timeout time.Duration) error {
		msg := datagram()
		if _, err := c.Write(msg); err != nil {
			return fmt.Errorf("sending: %w", err)
		}
		return await(c.SetReadDeadline, c.Read, append([]byte(want+" "), msg...), timeout)
	}
	if err := ask("first", reachTimeout); err != nil {
		t.Fatalf("a datagram through the relay: %v", err)
	}
	mu.Lock()
	target = second
	mu.Unlock()
	if err := ask("second", reachTimeout); err != nil {
		t.Fatalf("a datagram through the relay after its target moved: %v", err)
	}
	must(t, a.Cut(endpoint(t, relay)))
	if err := ask("second", dialTimeout); err == nil {
		t.Error("a datagram through the relay's cut address was answered")
	}
	must(t, a.Heal())
	if err := ask("second", reachTimeout); err != nil {
		t.Errorf("a datagram through the relay after Heal: %v", err)
	}
}

// udpAnswerer answers every datagram on a UDP port of 127.0.0.1 with name, a space and the
// datagram; it returns the port's address.
func udpAnswerer(t *testing.T, name string) string {
	t.Helper()
	pc, err := udpOnHost(t, "127.0.0.1", 0)
	must(t, err)
	go func() {
		buf := make([]byte, 1024)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte(name+" "), buf[:n]...), from)
		}
	}()
	return pc.LocalAddr().String()
}
