package channel

import (
	"context"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
)

// sendClock places heartbeats by when they were sent, on the server's clock: late by at most the
// shortest recent delay while the agent's clock runs steadily, whatever its offset; a heartbeat
// held back for seconds reads as sent when it was; a clock stepped forward is placed right at
// once, one stepped back early (never late) until the old offset ages out; the first heartbeat,
// and one without SentAt, are not placed.
func TestSendClockPlacesHeartbeats(t *testing.T) {
	const offset = -3 * time.Second // the agent's clock is 3 s behind the server's
	var c sendClock
	at := t0
	// beat is a heartbeat sent at the server's time at, on the agent's clock off from the
	// server's, delayed by delay on the way; it returns its placement and the true sending.
	beat := func(off, delay time.Duration) (sent, truth time.Time) {
		at = at.Add(time.Second)
		return c.sent(agentwire.Heartbeat{SentAt: at.Add(off), Received: at.Add(delay)}), at
	}
	if sent, _ := beat(offset, time.Millisecond); !sent.IsZero() {
		t.Errorf("the first heartbeat placed at %s, want it not placed", sent)
	}
	delays := []time.Duration{3 * time.Millisecond, time.Millisecond, 4 * time.Millisecond, 2 * time.Millisecond}
	for i := range 2 * sendClockHalf {
		sent, truth := beat(offset, delays[i%len(delays)])
		if late := sent.Sub(truth); late < 0 || late > time.Millisecond {
			t.Fatalf("heartbeat %d placed %s from its sending, want late by at most the shortest delay (1ms)", i, late)
		}
	}
	sent, truth := beat(offset, 10*time.Second) // held back in the network
	if late := sent.Sub(truth); late < 0 || late > time.Millisecond {
		t.Errorf("a heartbeat held back 10s placed %s from its sending, want within 1ms after it", late)
	}
	sent, truth = beat(offset+2*time.Second, 2*time.Millisecond) // the agent's clock stepped forward
	if late := sent.Sub(truth); late < 0 || late > 2*time.Millisecond {
		t.Errorf("after a step forward, placed %s from its sending, want within its delay", late)
	}
	back := offset - 2*time.Second // and stepped back, past where it was
	for i := range 2 * sendClockHalf {
		sent, truth := beat(back, time.Millisecond)
		if sent.After(truth.Add(time.Millisecond)) {
			t.Fatalf("heartbeat %d after a step back placed %s after its sending, want never late", i, sent.Sub(truth))
		}
	}
	if sent, truth := beat(back, time.Millisecond); !sent.Equal(truth.Add(time.Millisecond)) {
		t.Errorf("two halves after a step back placed %s from its sending, want the step aged out (1ms)", sent.Sub(truth))
	}
	if sent := c.sent(agentwire.Heartbeat{Received: at}); !sent.IsZero() {
		t.Errorf("a heartbeat without SentAt placed at %s, want not placed", sent)
	}
}

// On a real network: an agent in a network namespace cut off by nftables for 3 s while its
// HTTPS heartbeat is on the way (sent before its time runs out: the kernel retransmits it after
// the heal) is received late, and the server places it when it was sent, not when it arrived; a
// read-back it carries is not taken as from after the heal. The heartbeats before it, prompt,
// are what the server tells the delay by. Forget starts a node over.
func TestHeartbeatHeldBackReadsAsSentWhenItWas(t *testing.T) {
	s, c, agentNet := agentCutOffable(t)
	send := func(seq uint64, sentAt time.Time) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := c.Send(ctx, agentwire.Report{Node: "n1", BootID: "b1", Instance: "i1", Seq: seq, IntervalMillis: 1000, SentAt: sentAt})
		return err
	}
	for seq := uint64(1); seq <= 5; seq++ {
		if err := send(seq, time.Now()); err != nil {
			t.Fatal(err)
		}
		hb, _, _ := s.Latest("n1")
		if seq == 1 && !hb.Sent.IsZero() {
			t.Errorf("the first heartbeat placed at %s, want it not placed", hb.Sent)
		}
		if late := hb.Received.Sub(hb.Sent); seq > 1 && (hb.Sent.IsZero() || late < 0 || late > 100*time.Millisecond) {
			t.Errorf("prompt heartbeat %d placed %s before its arrival, want within 100ms", seq, late)
		}
	}
	if err := agentNet.CutAll(); err != nil {
		t.Fatal(err)
	}
	sentAt := time.Now()
	done := make(chan error, 1)
	go func() { done <- send(6, sentAt) }()
	time.Sleep(3 * time.Second)
	if err := agentNet.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the heartbeat held back by the cut was not delivered after the heal: %v", err)
	}
	hb, _, _ := s.Latest("n1")
	if hb.Seq != 6 {
		t.Fatalf("latest heartbeat seq %d, want the held-back one, 6", hb.Seq)
	}
	if held := hb.Received.Sub(sentAt); held < 2500*time.Millisecond {
		t.Fatalf("the heartbeat arrived %s after it was sent: the cut did not hold it back, the test did not test", held)
	}
	if off := hb.Sent.Sub(sentAt); hb.Sent.IsZero() || off < 0 || off > 100*time.Millisecond {
		t.Errorf("the held-back heartbeat (received %s after its sending) placed %s after its sending, want within 100ms", hb.Received.Sub(sentAt), off)
	}
	s.Forget("n1")
	if err := send(7, time.Now()); err != nil {
		t.Fatal(err)
	}
	if hb, _, _ := s.Latest("n1"); !hb.Sent.IsZero() {
		t.Errorf("the first heartbeat after Forget placed at %s, want it not placed", hb.Sent)
	}
}

// A heartbeat the network held back reports the peers its agent could not reach when it was
// sent, not when it arrived: such a report is evidence toward fencing the peer, and taken by
// arrival it would read seconds fresher than it is. A peer it reached stays placed by arrival
// (a sign of life is never made older than it may be).
func TestHeldBackHeartbeatReportsUnreachedPeersAsOld(t *testing.T) {
	s := bareServer()
	const offset = -3 * time.Second // n1's clock is 3 s behind the server's
	at := t0
	for seq := uint64(1); seq <= 3; seq++ { // prompt: what the delay is told by
		at = at.Add(time.Second)
		s.record(toHeartbeat(agentwire.Report{Node: "n1", Seq: seq, SentAt: at.Add(offset)}, at.Add(time.Millisecond), t0.Add(time.Hour)))
	}
	sent := at.Add(time.Second)
	received := sent.Add(10 * time.Second) // held back 10 s
	probed := sent.Add(offset - 100*time.Millisecond)
	s.record(toHeartbeat(agentwire.Report{Node: "n1", Seq: 4, SentAt: sent.Add(offset), Peers: []agentwire.PeerReport{
		{Node: "n2", Reachable: false, At: probed}, {Node: "n3", Reachable: true, At: probed}}}, received, t0.Add(time.Hour)))
	_, about, _ := s.Latest("n2")
	if len(about) != 1 || about[0].Reachable || about[0].At.After(sent) {
		t.Errorf("n1's report that it could not reach n2: %+v, want it placed before n1 sent it at %s (it arrived at %s)", about, sent, received)
	}
	_, about, _ = s.Latest("n3")
	if len(about) != 1 || !about[0].Reachable || about[0].At.Before(received.Add(-time.Second)) {
		t.Errorf("n1's report that it reached n3: %+v, want it placed by arrival (%s)", about, received)
	}
}
