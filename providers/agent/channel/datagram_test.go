package channel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptrace"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
)

// connCounter counts the HTTPS connections a client's calls with its context get.
type connCounter struct{ got, reused int }

func (c *connCounter) ctx() context.Context {
	return httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		c.got++
		if i.Reused {
			c.reused++
		}
	}})
}

// TestHeartbeatDatagrams: an agent's first heartbeat goes over HTTPS and gets a key; the next
// ones go as datagrams, each recorded with its Seq and answered without any HTTPS request; a
// pending command makes the controller ask for an exchange, which delivers it over HTTPS.
func TestHeartbeatDatagrams(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	c := newClient(t, p, s.Addr(), certFile, keyFile)
	var conns connCounter
	ctx := conns.ctx()
	beat := func(seq uint64) agentwire.Response {
		t.Helper()
		resp, err := c.Exchange(ctx, agentwire.Report{Node: "n1", BootID: "b1", Seq: seq})
		if err != nil {
			t.Fatalf("heartbeat %d: %v", seq, err)
		}
		if hb, _, ok := s.Latest("n1"); !ok || hb.Seq != seq {
			t.Fatalf("after heartbeat %d the server holds seq %d (%v)", seq, hb.Seq, ok)
		}
		return resp
	}
	beat(1)
	if conns.got != 1 {
		t.Fatalf("the first heartbeat made %d HTTPS requests, want 1 (for the key)", conns.got)
	}
	for seq := uint64(2); seq <= 6; seq++ {
		beat(seq)
	}
	if conns.got != 1 {
		t.Errorf("5 heartbeats with a key made %d more HTTPS requests, want none", conns.got-1)
	}
	if got := s.DatagramCounts()[dgAccepted]; got != 5 {
		t.Errorf("%d datagrams accepted, want 5", got)
	}
	s.SetCommand("n1", agentwire.Command{ID: "c1", Action: agentwire.ActionTerminate})
	if resp := beat(7); resp.Command == nil || resp.Command.ID != "c1" {
		t.Errorf("heartbeat with a pending command got %+v, want command c1", resp.Command)
	}
	if conns.got != 2 || conns.reused != 0 {
		t.Errorf("the pending command took %d HTTPS requests, %d on a kept connection; want 1 on a new one (an agent whose heartbeats go as datagrams keeps none open)", conns.got-1, conns.reused)
	}
	if got := s.DatagramCounts(); got[dgExchange] != 1 || got[dgAccepted] != 5 {
		t.Errorf("the datagram of the heartbeat with a command pending counted %v, want it answered exchange, unrecorded", got)
	}
	s.ClearCommand("n1", "c1")
	if resp := beat(8); resp.Command != nil {
		t.Errorf("heartbeat after the command was cleared got command %+v", resp.Command)
	}
}

// TestDatagramPeers: an agent answered by datagram keeps probing the peers it was last told;
// when its peers change the controller asks for an exchange that tells the new ones.
func TestDatagramPeers(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{ProbePeers: 2})
	clients := map[string]*Client{}
	seq := map[string]uint64{}
	beat := func(node string) agentwire.Response {
		t.Helper()
		if clients[node] == nil {
			certFile, keyFile := p.agentFiles(t, p.ca, node)
			clients[node] = newClient(t, p, s.Addr(), certFile, keyFile)
		}
		seq[node]++
		resp, err := clients[node].Exchange(context.Background(), agentwire.Report{Node: node, Seq: seq[node], ProbePort: 7000})
		if err != nil {
			t.Fatalf("heartbeat of %s: %v", node, err)
		}
		return resp
	}
	beat("n1")
	beat("n2")
	first := beat("n1") // told n2, over HTTPS (its peers changed)
	if len(first.Peers) != 1 || first.Peers[0].Node != "n2" {
		t.Fatalf("n1 told peers %+v, want n2", first.Peers)
	}
	accepted := s.DatagramCounts()[dgAccepted]
	if again := beat("n1"); !equalTargets(again.Peers, first.Peers) {
		t.Errorf("n1's next heartbeat answered peers %+v, want the ones it was told %+v", again.Peers, first.Peers)
	}
	if s.DatagramCounts()[dgAccepted] != accepted+1 {
		t.Errorf("n1's heartbeat with unchanged peers did not go as a datagram")
	}
	beat("n3")
	if got := beat("n1"); len(got.Peers) != 2 {
		t.Errorf("after n3 joined, n1 was answered peers %+v, want n2 and n3", got.Peers)
	}
}

func equalTargets(a, b []agentwire.PeerTarget) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestDatagramsRefused is what the server does with datagrams nobody may send: forged,
// replayed, naming another node, with an unknown, replaced, forgotten or expired key,
// malformed. None of them records a heartbeat, refreshes one's arrival time, or is answered
// as accepted.
func TestDatagramsRefused(t *testing.T) {
	p := newPKI(t)
	now := t0
	s := startServer(t, p, ServerOptions{Now: func() time.Time { return now }})
	notAfter := t0.Add(time.Hour)
	key := func(node string) agentwire.DatagramKey {
		t.Helper()
		var resp agentwire.Response
		if err := s.answeredOverHTTPS(agentwire.Report{Node: node, Datagrams: true}, node, notAfter, &resp); err != nil || resp.Datagram == nil {
			t.Fatalf("no key for %s: %v", node, err)
		}
		return *resp.Datagram
	}
	seal := func(k agentwire.DatagramKey, rep agentwire.Report) []byte {
		b, _ := json.Marshal(rep)
		d, ok := agentwire.SealHeartbeat(k.ID, k.Key, b)
		if !ok {
			t.Fatal("datagram too large")
		}
		return d
	}
	from := netip.MustParseAddrPort("192.0.2.7:40000")
	k1, k2 := key("n1"), key("n2")
	ok := seal(k1, agentwire.Report{Node: "n1", Seq: 5})
	if a, err := agentwire.OpenAnswer(s.handleDatagram(ok, from, now), k1.ID, k1.Key); err != nil || a.Seq != 5 || a.UnknownKey {
		t.Fatalf("a valid datagram was answered %+v, %v", a, err)
	}
	received := func(node string) time.Time { hb, _, _ := s.Latest(node); return hb.Received }
	before := received("n1")
	now = now.Add(time.Second)

	forged := bytes.Clone(seal(k1, agentwire.Report{Node: "n1", Seq: 9}))
	forged[len(forged)-1] ^= 1
	otherKey := agentwire.DatagramKey{ID: k1.ID, Key: bytes.Repeat([]byte{7}, agentwire.DatagramKeyBytes)}
	unknown := agentwire.DatagramKey{ID: bytes.Repeat([]byte{1}, agentwire.DatagramKeyIDBytes), Key: k1.Key}
	cases := []struct {
		name       string
		b          []byte
		unknownKey bool // answered "unknown key"
		counted    int
	}{
		{"tag flipped", forged, false, dgUnauthenticated},
		{"signed with another key", seal(otherKey, agentwire.Report{Node: "n1", Seq: 10}), false, dgUnauthenticated},
		{"replayed", ok, false, dgReplayed},
		{"an older seq", seal(k1, agentwire.Report{Node: "n1", Seq: 4}), false, dgReplayed},
		{"naming another node", seal(k1, agentwire.Report{Node: "n2", Seq: 11}), false, dgInvalid},
		{"invalid report", seal(k1, agentwire.Report{Node: "n1", Seq: 12, IntervalMillis: -1}), false, dgInvalid},
		{"not JSON", mustSeal(t, k1, []byte("{")), false, dgInvalid},
		{"unknown key", seal(unknown, agentwire.Report{Node: "n1", Seq: 13}), true, dgUnknownKey},
		{"too short", []byte("PHB1"), false, dgMalformed},
		{"too long", append(bytes.Clone(ok), make([]byte, agentwire.MaxDatagramBytes)...), false, dgMalformed},
	}
	for _, tc := range cases {
		counts := s.DatagramCounts()
		answer := s.handleDatagram(tc.b, from, now)
		if tc.unknownKey != (answer != nil) {
			t.Errorf("%s: answered %q", tc.name, answer)
		}
		if answer != nil {
			if a, err := agentwire.OpenAnswer(answer, unknown.ID, unknown.Key); err != nil || !a.UnknownKey {
				t.Errorf("%s: answer %+v, %v; want unknown key", tc.name, a, err)
			}
		}
		if got := s.DatagramCounts()[tc.counted]; got != counts[tc.counted]+1 {
			t.Errorf("%s: not counted as %s", tc.name, DatagramResults[tc.counted])
		}
		if got := received("n1"); !got.Equal(before) {
			t.Errorf("%s: n1's heartbeat arrival moved from %s to %s", tc.name, before, got)
		}
		if _, _, ok := s.Latest("n2"); ok {
			t.Errorf("%s: n2 has a heartbeat", tc.name)
		}
	}

	// A new key replaces the old one at once; a forgotten node's key is gone; an expired one too.
	k1b := key("n1")
	if a, _ := agentwire.OpenAnswer(s.handleDatagram(seal(k1, agentwire.Report{Node: "n1", Seq: 20}), from, now), k1.ID, k1.Key); !a.UnknownKey {
		t.Errorf("a replaced key's datagram was not answered unknown key")
	}
	s.Forget("n2")
	if a, _ := agentwire.OpenAnswer(s.handleDatagram(seal(k2, agentwire.Report{Node: "n2", Seq: 1}), from, now), k2.ID, k2.Key); !a.UnknownKey {
		t.Errorf("a forgotten node's datagram was not answered unknown key")
	}
	now = notAfter.Add(time.Second)
	if a, _ := agentwire.OpenAnswer(s.handleDatagram(seal(k1b, agentwire.Report{Node: "n1", Seq: 21}), from, now), k1b.ID, k1b.Key); !a.UnknownKey {
		t.Errorf("a datagram after its certificate expired was not answered unknown key")
	}
	if got := received("n1"); !got.Equal(before) {
		t.Errorf("n1's heartbeat arrival moved from %s to %s", before, got)
	}
}

func mustSeal(t *testing.T, k agentwire.DatagramKey, payload []byte) []byte {
	t.Helper()
	d, ok := agentwire.SealHeartbeat(k.ID, k.Key, payload)
	if !ok {
		t.Fatal("datagram too large")
	}
	return d
}

// TestDatagramsFallBack: heartbeats reach the controller whatever happens to datagrams: a
// controller that forgot the key (a new leader) gives a new one over HTTPS; one whose datagrams
// go unanswered gets every heartbeat over HTTPS, and after 3 misses the agent stops waiting
// for datagram answers.
func TestDatagramsFallBack(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	c := newClient(t, p, s.Addr(), certFile, keyFile)
	seq := uint64(0)
	beat := func() time.Duration {
		t.Helper()
		seq++
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := c.Exchange(ctx, agentwire.Report{Node: "n1", Seq: seq}); err != nil {
			t.Fatalf("heartbeat %d: %v", seq, err)
		}
		if hb, _, _ := s.Latest("n1"); hb.Seq != seq {
			t.Fatalf("heartbeat %d not recorded (server holds %d)", seq, hb.Seq)
		}
		return time.Since(start)
	}
	beat()
	beat()
	s.mu.Lock()
	s.forgetKey("n1") // as a new leader: it holds no key
	s.mu.Unlock()
	beat()
	if got := s.DatagramCounts()[dgUnknownKey]; got != 1 {
		t.Errorf("%d datagrams answered unknown key, want 1", got)
	}
	accepted := s.DatagramCounts()[dgAccepted]
	beat()
	if got := s.DatagramCounts()[dgAccepted]; got != accepted+1 {
		t.Errorf("after a new key, the heartbeat did not go as a datagram")
	}

	// Datagrams go unanswered from now on: a socket that reads them and never answers.
	addr := s.dg.conn.LocalAddr().(*net.UDPAddr)
	_ = s.dg.conn.Close()
	hole, err := net.ListenUDP("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	for range datagramMisses {
		if d := beat(); d < 900*time.Millisecond {
			t.Errorf("an unanswered datagram's heartbeat took %s, want it to wait ~1s for an answer first", d)
		}
	}
	if d := beat(); d > 500*time.Millisecond {
		t.Errorf("after %d misses a heartbeat still waited %s for a datagram answer", datagramMisses, d)
	}
	got := 0
	buf := make([]byte, agentwire.MaxDatagramBytes)
	for {
		_ = hole.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := hole.Read(buf); err != nil {
			break
		}
		got++
	}
	if got != datagramMisses {
		t.Errorf("%d datagrams sent into the void, want %d (then HTTPS only)", got, datagramMisses)
	}
}

// TestDatagramIntervalNews: when the node's policy asks for another interval, the next datagram
// is answered "post", and the post tells the agent the new interval.
func TestDatagramIntervalNews(t *testing.T) {
	p := newPKI(t)
	var interval atomic.Int64
	interval.Store(int64(time.Second))
	s := startServer(t, p, ServerOptions{IntervalFor: func(string) time.Duration { return time.Duration(interval.Load()) }})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	c := newClient(t, p, s.Addr(), certFile, keyFile)
	beat := func(seq uint64, every time.Duration) agentwire.Response {
		t.Helper()
		resp, err := c.Exchange(context.Background(), agentwire.Report{Node: "n1", Seq: seq, IntervalMillis: every.Milliseconds()})
		if err != nil {
			t.Fatalf("heartbeat %d: %v", seq, err)
		}
		return resp
	}
	beat(1, time.Second) // over HTTPS, for the key
	if resp := beat(2, time.Second); resp.IntervalMillis != 0 || s.DatagramCounts()[dgAccepted] != 1 {
		t.Fatalf("an unchanged interval: answered %+v, counts %v; want a datagram accepted, no interval", resp, s.DatagramCounts())
	}
	interval.Store(int64(200 * time.Millisecond))
	if resp := beat(3, time.Second); resp.IntervalMillis != 200 {
		t.Errorf("after the policy's interval changed, the answer asked for %dms, want 200ms", resp.IntervalMillis)
	}
	if got := s.DatagramCounts()[dgExchange]; got != 1 {
		t.Errorf("%d datagrams answered post, want 1", got)
	}
	if resp := beat(4, 200*time.Millisecond); resp.IntervalMillis != 0 || s.DatagramCounts()[dgAccepted] != 2 {
		t.Errorf("at the new interval: answered %+v, counts %v; want a datagram accepted, no interval", resp, s.DatagramCounts())
	}
}

// TestDatagramBursts: datagrams of many agents queued at once are read in batches and their
// answers written in batches; each agent gets its own answer (its seq, under its key) at its
// own address and each heartbeat is recorded, on an IPv4 socket and on an IPv6 one.
func TestDatagramBursts(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			s := startServer(t, newPKI(t), ServerOptions{Addr: addr})
			const agents = 4 * datagramBatch
			keys, socks := datagramAgents(t, s, agents)
			for round := uint64(1); round <= 3; round++ {
				for i, c := range socks {
					b, _ := json.Marshal(agentwire.Report{Node: fmt.Sprintf("n%d", i), Seq: round*1000 + uint64(i)})
					if _, err := c.Write(mustSeal(t, keys[i], b)); err != nil {
						t.Fatal(err)
					}
				}
				for i, c := range socks {
					want := round*1000 + uint64(i)
					acceptedAnswer(t, c, keys[i], want)
					if hb, _, ok := s.Latest(fmt.Sprintf("n%d", i)); !ok || hb.Seq != want {
						t.Fatalf("round %d: n%d's heartbeat recorded with seq %d (%v), want %d", round, i, hb.Seq, ok, want)
					}
				}
			}
			if got := s.DatagramCounts()[dgAccepted]; got != 3*agents {
				t.Errorf("%d datagrams accepted, want %d", got, 3*agents)
			}
		})
	}
}

// datagramAgents gives n agents (nodes n0, n1, …) a key each from s and a socket to its
// datagram port.
func datagramAgents(t *testing.T, s *Server, n int) ([]agentwire.DatagramKey, []*net.UDPConn) {
	t.Helper()
	keys := make([]agentwire.DatagramKey, n)
	socks := make([]*net.UDPConn, n)
	to := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s.Addr()))
	for i := range keys {
		node := fmt.Sprintf("n%d", i)
		var resp agentwire.Response
		if err := s.answeredOverHTTPS(agentwire.Report{Node: node, Datagrams: true}, node, time.Now().Add(time.Hour), &resp); err != nil || resp.Datagram == nil {
			t.Fatalf("no key for %s: %v", node, err)
		}
		keys[i] = *resp.Datagram
		c, err := net.DialUDP("udp", nil, to)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		socks[i] = c
	}
	return keys, socks
}

// acceptedAnswer reads the answer on an agent's socket and fails unless it accepts the
// heartbeat with seq, under the agent's key, with no flags.
func acceptedAnswer(t *testing.T, c *net.UDPConn, k agentwire.DatagramKey, seq uint64) {
	t.Helper()
	buf := make([]byte, 2*agentwire.MaxDatagramBytes)
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("the agent at %s got no answer to seq %d: %v", c.LocalAddr(), seq, err)
	}
	if a, err := agentwire.OpenAnswer(buf[:n], k.ID, k.Key); err != nil || a.Seq != seq || a.UnknownKey || a.Flags != 0 {
		t.Fatalf("the agent at %s was answered %+v, %v; want seq %d accepted under its key", c.LocalAddr(), a, err, seq)
	}
}

// TestDatagramsLinger: heartbeats that arrive spread out, as thousands of agents send them, are
// still read several at a time: a reader waits datagramLinger after a read that did not fill its
// batch, instead of waking and reading once per heartbeat. Each is still answered.
func TestDatagramsLinger(t *testing.T) {
	s := startServer(t, newPKI(t), ServerOptions{})
	const agents = 4 * datagramBatch
	const every = 200 * time.Microsecond // 5000 agents at 1 s
	keys, socks := datagramAgents(t, s, agents)
	for round := uint64(1); ; round++ {
		before := s.dg.reads.Load()
		start := time.Now()
		for i, c := range socks {
			b, _ := json.Marshal(agentwire.Report{Node: fmt.Sprintf("n%d", i), Seq: round})
			for time.Since(start) < time.Duration(i)*every {
				// spin: a sleep this short oversleeps
			}
			if _, err := c.Write(mustSeal(t, keys[i], b)); err != nil {
				t.Fatal(err)
			}
		}
		took := time.Since(start)
		for i, c := range socks {
			acceptedAnswer(t, c, keys[i], round)
		}
		reads := s.dg.reads.Load() - before
		// Each reader reads at most once per linger while they arrive, and once more at the end.
		bound := uint64(datagramReaders) * uint64(took/datagramLinger+2)
		if bound >= agents/2 {
			// The sending was held up (a loaded machine): no telling from this round.
			if round == 5 {
				t.Fatalf("sending %d datagrams %s apart took %s in each of 5 rounds; the machine is too loaded to tell", agents, every, took)
			}
			continue
		}
		if reads > bound {
			t.Errorf("%d datagrams sent over %s were read in %d reads, want at most %d (%d readers, one read per %s linger)", agents, took, reads, bound, datagramReaders, datagramLinger)
		}
		return
	}
}
