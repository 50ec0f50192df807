package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Node is a simulated node's network namespace on a LAN: loopback up and one veth (eth0) into
// the LAN's bridge holding IP/24. Its methods are safe for concurrent use.
type Node struct {
	lan   *LAN
	name  string
	index int
	ns    string
	ip    string
	// lanEnd is the name, inside the lan namespace, of the node veth's bridge end.
	lanEnd string

	mu   sync.Mutex
	cuts map[Endpoint]int // each cut endpoint, with how many cuts in force name it
	all  bool
}

// AddNode creates the namespace of a node called name (unique on the LAN) at address
// 10.231.k.(10+i) for the LAN's i-th node. Like New, it fails the test that made the LAN on
// error, so call it from that test's goroutine.
func (l *LAN) AddNode(name string) *Node {
	l.t.Helper()
	l.mu.Lock()
	for _, other := range l.nodes {
		if other.name == name {
			l.mu.Unlock()
			l.t.Fatalf("netns: adding node %s: the LAN already has a node of that name", name)
		}
	}
	i := len(l.nodes)
	if i >= maxNodes {
		l.mu.Unlock()
		l.t.Fatalf("netns: adding node %s: a LAN holds at most %d nodes", name, maxNodes)
	}
	n := &Node{
		lan: l, name: name, index: i,
		ns:     l.prefix + "-n" + strconv.Itoa(i),
		ip:     l.ip(firstNodeOctet + i),
		lanEnd: "n" + strconv.Itoa(i),
		cuts:   map[Endpoint]int{},
	}
	l.nodes = append(l.nodes, n)
	l.mu.Unlock()
	if err := n.create(); err != nil {
		l.t.Fatalf("netns: adding node %s: %v", name, err)
	}
	return n
}

func (n *Node) create() error {
	tl := n.lan.tools
	for _, args := range [][]string{
		{"netns", "add", n.ns},
		{"-n", n.lan.lanNS, "link", "add", n.lanEnd, "type", "veth", "peer", "name", nodeIface, "netns", n.ns},
		{"-n", n.lan.lanNS, "link", "set", n.lanEnd, "master", bridge, "up"},
		{"-n", n.ns, "addr", "add", n.ip + "/24", "dev", nodeIface},
		{"-n", n.ns, "link", "set", nodeIface, "up"},
		{"-n", n.ns, "link", "set", "lo", "up"},
	} {
		if err := tl.ip(args...); err != nil {
			return err
		}
	}
	n.lan.logf("node %s: namespace %s at %s", n.name, n.ns, n.ip)
	return nil
}

// remove deletes the node's veth (even when a socket still holds the namespace) and its
// namespace, killing the processes left in it.
func (n *Node) remove() error {
	var errs []error
	if err := n.lan.tools.ip("-n", n.lan.lanNS, "link", "delete", n.lanEnd); err != nil && !missing(err) {
		errs = append(errs, err)
	}
	errs = append(errs, n.lan.tools.deleteNS(n.ns, n.lan.logf))
	return errors.Join(errs...)
}

// Name is the node's name given to AddNode.
func (n *Node) Name() string { return n.name }

// IP is the node's address on the LAN.
func (n *Node) IP() string { return n.ip }

// NetNS is the name of the node's network namespace (for ip netns exec, ip -n).
func (n *Node) NetNS() string { return n.ns }

// NetNSPath is the file that holds the node's network namespace (for setns or nsenter --net).
func (n *Node) NetNSPath() string { return filepath.Join(netnsDir, n.ns) }

// Route sends the node's traffic for cidr through via (a machine on the LAN routing for the
// pods behind it).
func (n *Node) Route(cidr, via string) error {
	if err := n.lan.tools.ip("-n", n.ns, "route", "add", cidr, "via", via); err != nil {
		return fmt.Errorf("routing %s via %s on node %s: %w", cidr, via, n.name, err)
	}
	return nil
}

// Command returns a command that runs path with args inside the node's namespace, through
// `ip netns exec` (which execs path: the process's PID is the command's). It gets SIGKILL
// when the test process dies; the caller may change SysProcAttr, Stdout, Stderr and so on
// before Start.
func (n *Node) Command(ctx context.Context, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, n.lan.tools.ipPath, append([]string{"netns", "exec", n.ns, path}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Dial connects to address (an IP literal and a port) from inside the node's namespace; the
// connection stays in the namespace, and cuts apply to it.
func (n *Node) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if err := checkLiteral(address); err != nil {
		return nil, fmt.Errorf("dialing %s from node %s: %w", address, n.name, err)
	}
	var conn net.Conn
	err := n.do(func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, address)
		return err
	})
	return conn, err
}

// Listen listens on address (an IP literal and a port, e.g. n.IP()+":0") inside the node's
// namespace. Close it before the test ends: an open socket keeps the namespace alive.
func (n *Node) Listen(network, address string) (net.Listener, error) {
	if err := checkLiteral(address); err != nil {
		return nil, fmt.Errorf("listening on %s in node %s: %w", address, n.name, err)
	}
	var ln net.Listener
	err := n.do(func() error {
		var err error
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// checkLiteral refuses host names: their resolution could create sockets on other threads,
// outside the namespace.
func checkLiteral(address string) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return fmt.Errorf("host %q is not an IP address: give an IP literal", host)
	}
	return nil
}

// do runs f on an OS thread switched into the node's namespace, so that the sockets f creates
// belong to it. The thread returns to its namespace afterwards; if it cannot, it stays locked
// and ends with the goroutine, so that nothing else ever runs in the wrong namespace.
func (n *Node) do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored := false
		defer func() {
			if restored {
				runtime.UnlockOSThread()
			}
		}()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			restored = true
			errc <- fmt.Errorf("opening this thread's network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := setns(n.NetNSPath()); err != nil {
			restored = true
			errc <- fmt.Errorf("entering namespace of node %s: %w", n.name, err)
			return
		}
		ferr := f()
		restored = unix.Setns(orig, unix.CLONE_NEWNET) == nil
		errc <- ferr
	}()
	return <-errc
}

func setns(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Setns(fd, unix.CLONE_NEWNET)
}
