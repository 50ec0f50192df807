package netns

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// table is the nftables table (family inet) that holds a node's cuts, inside its namespace.
const table = "palisade"

// Endpoint is a peer of a node that a cut separates it from: an IP address and a port, which
// a cut closes to both TCP and UDP (a service may listen on one port number with both, as the
// controller does for the agents' heartbeats: a partition must silence both), where port 0
// means every packet to or from the address (any protocol, any port).
type Endpoint struct {
	IP   string
	Port int
}

// ParseEndpoint parses "ip:port" (e.g. an address returned by LAN.Relay) or a bare "ip"
// (port 0, every port).
func ParseEndpoint(s string) (Endpoint, error) {
	if addr, err := netip.ParseAddr(s); err == nil {
		return Endpoint{IP: addr.String()}, nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("parsing endpoint %q: want ip or ip:port: %w", s, err)
	}
	return Endpoint{IP: ap.Addr().String(), Port: int(ap.Port())}, nil
}

// String is "ip:port", or "ip" for port 0.
func (e Endpoint) String() string {
	if e.Port == 0 {
		return e.IP
	}
	return net.JoinHostPort(e.IP, strconv.Itoa(e.Port))
}

func (e Endpoint) validate() error {
	addr, err := netip.ParseAddr(e.IP)
	if err != nil {
		return fmt.Errorf("endpoint %s: %w", e, err)
	}
	if e.Port < 0 || e.Port > 65535 {
		return fmt.Errorf("endpoint %s: port out of range", e)
	}
	if addr.Zone() != "" {
		return fmt.Errorf("endpoint %s: zoned addresses are not supported", e)
	}
	return nil
}

// Cut drops, from now on, every packet between the node and each peer, in both directions:
// for a peer with a port, the TCP and UDP traffic to and from that port; for a peer without,
// all traffic with that address. Established connections stop passing data (packets are
// dropped, not rejected: the peers see silence, as with a broken link). One difference from a
// broken link: a datagram the node itself sends to a cut peer fails at once with EPERM, as
// the kernel reports a drop in the output hook to the sending socket, where on a broken link
// it would vanish (TCP does not notice: it retransmits as after a loss). Datagrams from a cut
// peer, and those of the pods the node routes for, are lost silently. Cuts add up until Heal,
// or until Uncut takes each back: an endpoint cut twice (two faults) stays cut until both are.
func (n *Node) Cut(peers ...Endpoint) error {
	for _, p := range peers {
		if err := p.validate(); err != nil {
			return fmt.Errorf("cutting node %s: %w", n.name, err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range peers {
		n.cuts[p]++
	}
	return n.apply()
}

// Uncut takes back one Cut of each peer, leaving the node's other cuts in force: a fault that
// ends heals only what it cut. A peer not cut is an error (a heal without its cut).
func (n *Node) Uncut(peers ...Endpoint) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range peers {
		if n.cuts[p] == 0 {
			return fmt.Errorf("uncutting node %s from %s: not cut", n.name, p)
		}
	}
	for _, p := range peers {
		if n.cuts[p]--; n.cuts[p] == 0 {
			delete(n.cuts, p)
		}
	}
	return n.apply()
}

// UncutNodes takes back one CutNodes of the other nodes.
func (n *Node) UncutNodes(others ...*Node) error {
	return n.Uncut(endpointsOf(others)...)
}

// CutNodes cuts the node off from the other nodes (every packet, both directions), leaving its
// link to the root namespace and to the remaining nodes. The rules live in this node's
// namespace: n.Heal, not other.Heal, removes them.
func (n *Node) CutNodes(others ...*Node) error {
	return n.Cut(endpointsOf(others)...)
}

func endpointsOf(nodes []*Node) []Endpoint {
	peers := make([]Endpoint, 0, len(nodes))
	for _, o := range nodes {
		peers = append(peers, Endpoint{IP: o.ip})
	}
	return peers
}

// CutAll drops every packet that does not stay on the node's loopback: the node is cut off
// from the root namespace and every other node.
func (n *Node) CutAll() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.all = true
	return n.apply()
}

// Heal removes every cut of the node.
func (n *Node) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cuts)
	n.all = false
	return n.apply()
}

// apply replaces the node's table with the rules of its cuts, atomically. Called with mu held.
func (n *Node) apply() error {
	peers := make([]Endpoint, 0, len(n.cuts))
	for p := range n.cuts {
		peers = append(peers, p)
	}
	if err := n.lan.tools.nft(n.ns, ruleset(peers, n.all)); err != nil {
		return fmt.Errorf("cutting node %s: %w", n.name, err)
	}
	n.lan.logf("node %s: cuts %s", n.name, describe(peers, n.all))
	return nil
}

func describe(peers []Endpoint, all bool) string {
	switch {
	case all:
		return "everything but loopback"
	case len(peers) == 0:
		return "none"
	}
	s := make([]string, len(peers))
	for i, p := range peers {
		s[i] = p.String()
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// dropRule drops the packets from (addr saddr, port sport) or to (daddr, dport) peer. With a
// port, it matches TCP and UDP alike: "th" (the transport header) is where both keep their
// ports, and meta l4proto, unlike ip protocol, also finds UDP behind IPv6 extension headers.
func dropRule(p Endpoint, addr, port string) string {
	family := "ip"
	if netip.MustParseAddr(p.IP).Is6() {
		family = "ip6"
	}
	if p.Port == 0 {
		return fmt.Sprintf("\t\t%s %s %s drop\n", family, addr, p.IP)
	}
	return fmt.Sprintf("\t\t%s %s %s meta l4proto { tcp, udp } th %s %d drop\n", family, addr, p.IP, port, p.Port)
}

// ruleset is the nft script that replaces table inet palisade with drop rules for peers (and
// for everything but loopback when all), or just deletes it when there is nothing to cut.
func ruleset(peers []Endpoint, all bool) string {
	var b strings.Builder
	// Creating the table first makes the delete succeed whether or not it exists.
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\n", table, table)
	if len(peers) == 0 && !all {
		return b.String()
	}
	peers = slices.Clone(peers)
	slices.SortFunc(peers, func(a, b Endpoint) int {
		if c := netip.MustParseAddr(a.IP).Compare(netip.MustParseAddr(b.IP)); c != 0 {
			return c
		}
		return a.Port - b.Port
	})
	fmt.Fprintf(&b, "table inet %s {\n", table)
	for _, c := range []struct{ chain, iface, addr, port string }{
		{"input", "iif", "saddr", "sport"},
		{"output", "oif", "daddr", "dport"},
	} {
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook %s priority filter; policy accept;\n", c.chain, c.chain)
		if all {
			fmt.Fprintf(&b, "\t\t%s \"lo\" accept\n\t\tdrop\n\t}\n", c.iface)
			continue
		}
		for _, p := range peers {
			b.WriteString(dropRule(p, c.addr, c.port))
		}
		b.WriteString("\t}\n")
	}
	// Traffic the node routes for others — the pods behind a real machine's bridge — is cut
	// the same way: in both directions, or all of it that crosses the node's link to the LAN.
	b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n")
	if all {
		fmt.Fprintf(&b, "\t\tiifname %q drop\n\t\toifname %q drop\n", nodeIface, nodeIface)
	}
	for _, p := range peers {
		if !all {
			b.WriteString(dropRule(p, "saddr", "sport") + dropRule(p, "daddr", "dport"))
		}
	}
	b.WriteString("\t}\n")
	b.WriteString("}\n")
	return b.String()
}
