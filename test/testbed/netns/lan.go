package netns

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

const (
	// subnetBase is the first two octets of every LAN's subnet: the k-th LAN alive on the
	// machine uses subnetBase.k.0/24.
	subnetBase = "10.231"
	// hostOctet is the last octet of the root namespace's address (HostIP).
	hostOctet = 1
	// firstNodeOctet is the last octet of the first node's address.
	firstNodeOctet = 10
	maxNodes       = 254 - firstNodeOctet
	// namePrefix starts every namespace and root-namespace link a LAN makes.
	namePrefix = "pn"
	bridge     = "br0"
	// lanHostEnd is the name, inside the lan namespace, of the root veth's bridge end.
	lanHostEnd = "host"
	// nodeIface is the name of a node's veth end inside its own namespace.
	nodeIface = "eth0"
	netnsDir  = "/run/netns"
)

var lanSeq atomic.Int64

// LAN is one test's simulated network: a bridge in its own namespace, the root namespace's
// side at HostIP and the node namespaces of AddNode. It is removed in the cleanup of the test
// that made it. Its methods are safe for concurrent use.
type LAN struct {
	t      testing.TB
	tools  tools
	prefix string
	subnet int // third octet of the subnet
	lanNS  string
	// hostLink is the root namespace's end of the veth into the bridge.
	hostLink string

	mu    sync.Mutex
	nodes []*Node
}

// New creates a LAN for t: the lan namespace with its bridge and the root namespace's veth
// into it, holding HostIP/24. It first removes what earlier runs that no longer exist left
// behind, and registers the removal of everything it makes (node namespaces included) in
// t.Cleanup. It fails the test when not run as root or when ip or nft is missing.
func New(t testing.TB) *LAN {
	t.Helper()
	tl, err := findTools()
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	seq := lanSeq.Add(1) - 1
	prefix := namePrefix + strconv.FormatInt(int64(os.Getpid()), 36) + "-" + strconv.FormatInt(seq, 36)
	l := &LAN{t: t, tools: tl, prefix: prefix, lanNS: prefix + "-lan", hostLink: prefix + "h", subnet: -1}
	t.Cleanup(func() {
		if err := l.remove(); err != nil {
			t.Errorf("netns: removing LAN %s: %v", l.prefix, err)
		}
	})
	if err := l.create(); err != nil {
		t.Fatalf("netns: creating LAN %s: %v", l.prefix, err)
	}
	return l
}

// HostIP is the root namespace's address on the LAN, where the API server relay, the
// controller and the BMC simulators are reached from the nodes: 10.231.0.1 for the first LAN
// alive on the machine, 10.231.k.1 for the k-th one when several tests run at once.
func (l *LAN) HostIP() string { return l.ip(hostOctet) }

// Prefix starts the name of every namespace and root-namespace link of the LAN.
func (l *LAN) Prefix() string { return l.prefix }

// Heal removes every cut of every node of the LAN.
func (l *LAN) Heal() error {
	l.mu.Lock()
	nodes := append([]*Node(nil), l.nodes...)
	l.mu.Unlock()
	var errs []error
	for _, n := range nodes {
		errs = append(errs, n.Heal())
	}
	return errors.Join(errs...)
}

func (l *LAN) ip(octet int) string {
	return fmt.Sprintf("%s.%d.%d", subnetBase, l.subnet, octet)
}

func (l *LAN) logf(format string, args ...any) {
	l.t.Logf("netns %s: "+format, append([]any{l.prefix}, args...)...)
}

// create makes the lan namespace, its bridge and the root side. Holding the machine-wide
// lock, it removes leftovers and picks a subnet no other LAN uses.
func (l *LAN) create() error {
	unlock, err := lockMachine()
	if err != nil {
		return err
	}
	defer unlock()
	if err := removeLeftovers(l.tools, l.logf); err != nil {
		return err
	}
	if l.subnet, err = l.tools.freeSubnet(); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"netns", "add", l.lanNS},
		{"-n", l.lanNS, "link", "add", bridge, "type", "bridge"},
		{"link", "add", l.hostLink, "type", "veth", "peer", "name", lanHostEnd, "netns", l.lanNS},
		{"-n", l.lanNS, "link", "set", lanHostEnd, "master", bridge, "up"},
		{"-n", l.lanNS, "link", "set", bridge, "up"},
		{"addr", "add", l.HostIP() + "/24", "dev", l.hostLink},
		{"link", "set", l.hostLink, "up"},
	} {
		if err := l.tools.ip(args...); err != nil {
			return err
		}
	}
	l.logf("LAN up: root namespace at %s on %s, bridge in namespace %s", l.HostIP(), l.hostLink, l.lanNS)
	return nil
}

// remove deletes the nodes, then the root veth and the lan namespace. Missing pieces (a
// create that failed half-way) are not errors.
func (l *LAN) remove() error {
	l.mu.Lock()
	nodes := l.nodes
	l.nodes = nil
	l.mu.Unlock()
	var errs []error
	for i := len(nodes) - 1; i >= 0; i-- {
		errs = append(errs, nodes[i].remove())
	}
	errs = append(errs, l.tools.deleteLink(l.hostLink), l.tools.deleteNS(l.lanNS, l.logf))
	return errors.Join(errs...)
}
