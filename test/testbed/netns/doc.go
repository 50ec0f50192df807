// Package netns gives simulated nodes their own Linux network namespaces, so that a test can
// cut precisely chosen network links with nftables: node ↔ API server, node ↔ controller,
// node ↔ node, or everything.
//
// New builds one LAN per test: a "lan" namespace holding a Linux bridge, a veth from the root
// namespace into that bridge (the root side gets HostIP, 10.231.0.1/24 for the first LAN on the
// machine: the side of the API server, the controller and the BMC simulators), and, per
// AddNode, a namespace with loopback up and a veth into the bridge (10.231.0.(10+i)/24). Node ↔
// node traffic is bridged inside the lan namespace and node ↔ root traffic is direct, so
// nothing global changes in the root namespace: no IP forwarding, no firewall rule, only one
// interface with one address. Processes run in a node's namespace through Node.Command, and
// the test's own sockets through Node.Dial and Node.Listen. Relay makes a root-namespace
// service bound to loopback (the API server of the test bed) reachable at HostIP.
//
// Cuts are nftables rules in a table of their own (inet palisade) inside the node's namespace
// that drop packets in both directions, established connections included: all of them for a
// peer address, TCP and UDP for a peer address and port (a service such as the controller's
// heartbeat server may take both on one port number). Names of namespaces and root-namespace
// links start with a prefix unique to the LAN ("pn", the process ID and a sequence number in
// base 36), so parallel tests and processes never collide; New removes the leftovers of
// processes that no longer exist, and everything a LAN made is removed in t.Cleanup, also when
// the test fails. It needs root and Debian's iproute2 (ip) and nftables (nft): `make deps`
// installs them.
package netns
