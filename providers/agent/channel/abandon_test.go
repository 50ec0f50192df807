package channel

import (
	"context"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/test/testbed/netns"
)

// A heartbeat the agent gave up on, because the network dropped it until its time ran out,
// never reaches the controller, even when nothing newer came before it: on a real network (an
// agent in a network namespace cut off by nftables, as the chaos runs cut machines), the
// connection is aborted, so the kernel does not retransmit the request after the heal. Ended in
// order, it did: the heartbeat arrived within seconds of the heal and was recorded as the
// node's latest, carrying the state of the node from before the cut (here its kubelet healthy).
func TestAbandonedHeartbeatNeverArrives(t *testing.T) {
	s, c, agentNet := agentCutOffable(t)
	send := func(seq uint64, healthy bool, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := c.Send(ctx, agentwire.Report{Node: "n1", BootID: "b1", Instance: "i1", Seq: seq, KubeletHealthy: healthy, IntervalMillis: 1000, SentAt: time.Now()})
		return err
	}
	if err := send(1, false, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Cut: the next heartbeat's request sits unacknowledged in the agent's socket until its
	// time runs out.
	if err := agentNet.CutAll(); err != nil {
		t.Fatal(err)
	}
	if err := send(2, true, 2*time.Second); err == nil {
		t.Fatal("a heartbeat sent while the agent was cut off was answered")
	}
	if err := agentNet.Heal(); err != nil {
		t.Fatal(err)
	}
	// TCP's retransmission timer had backed off to at most 1.6 s after the 2 s of the cut;
	// the next retransmission would come within that of the heal, its delivery at once.
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if hb, _, ok := s.Latest("n1"); !ok || hb.Seq != 1 {
			t.Fatalf("after the heal the controller's latest heartbeat of n1 is seq %d (kubelet healthy %v), want the one before the cut, seq 1: the abandoned heartbeat arrived", hb.Seq, hb.KubeletHealthy)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The agent's next heartbeat goes through on a new connection.
	if err := send(3, false, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if hb, _, _ := s.Latest("n1"); hb.Seq != 3 {
		t.Errorf("latest seq %d after the next heartbeat, want 3", hb.Seq)
	}
}

// agentCutOffable starts a server on the host's side of a test LAN and an HTTPS-only client for
// node n1 whose connections come from a network namespace of its own, which the test cuts off
// and heals (agentNet) as the chaos runs cut machines.
func agentCutOffable(t *testing.T) (s *Server, c *Client, agentNet *netns.Node) {
	lan := netns.New(t)
	agentNet = lan.AddNode("agent")
	p := newPKI(t)
	s = startServer(t, p, ServerOptions{Addr: lan.HostIP() + ":0"})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	c = newClientWith(t, p, ClientOptions{Address: s.Addr(), ServerName: "localhost", CertFile: certFile, KeyFile: keyFile,
		NoDatagrams: true, Dial: agentNet.Dial})
	return s, c, agentNet
}
