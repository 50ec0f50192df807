package storagehost

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"palisade.dev/palisade/test/testbed/netns"
)

// Answer is what the storage service sends to every connection before closing it.
const Answer = "block device\n"

// ServicePort is the storage service's port (iSCSI's).
const ServicePort = "3260"

// dialTimeout bounds Served's dial and read.
const dialTimeout = 3 * time.Second

// Host is a storage host on a LAN serving its TCP service.
type Host struct {
	node    *netns.Node
	service string
}

// Start adds the node name to lan and serves the storage service on its address until the test
// ends. Like netns.LAN.AddNode, call it from the test's goroutine.
func Start(t testing.TB, lan *netns.LAN, name string) *Host {
	t.Helper()
	node := lan.AddNode(name)
	ln, err := node.Listen("tcp", net.JoinHostPort(node.IP(), ServicePort))
	if err != nil {
		t.Fatalf("storage host %s: %v", name, err)
	}
	// Closed before the LAN's own cleanup (registered earlier): an open socket keeps the
	// namespace alive.
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.WriteString(c, Answer); c.Close() }()
		}
	}()
	return &Host{node: node, service: ln.Addr().String()}
}

// Node is the storage host's node on the LAN.
func (h *Host) Node() *netns.Node { return h.node }

// IP is the storage host's address on the LAN.
func (h *Host) IP() string { return h.node.IP() }

// Service is the storage service's address, ip:port.
func (h *Host) Service() string { return h.service }

// NFT is the nft command run in the storage host's namespace (ip netns exec <ns> nft), as a
// gateway running there would run it.
func (h *Host) NFT() []string {
	return h.node.Command(context.Background(), "nft").Args
}

// RunNFT runs nft with args in the storage host's namespace and returns its output; it fails
// the test when nft fails.
func (h *Host) RunNFT(t testing.TB, args ...string) string {
	t.Helper()
	out, err := h.node.Command(context.Background(), "nft", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %q on storage host %s: %v: %s", args, h.node.Name(), err, out)
	}
	return string(out)
}

// Served dials the storage service from a node: true when it served, false when the dial was
// refused outright (ECONNREFUSED: a reject rule). Anything else, a timeout or another answer,
// fails the test: the node is neither served nor fenced off by a reject.
func (h *Host) Served(t testing.TB, from *netns.Node) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	c, err := from.Dial(ctx, "tcp", h.service)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	if err != nil {
		t.Fatalf("dialing the storage service %s from %s: %v; want served or refused", h.service, from.Name(), err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(dialTimeout))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != Answer {
		t.Fatalf("the storage service %s answered %s %q, %v; want %q", h.service, from.Name(), b, err, Answer)
	}
	return true
}
