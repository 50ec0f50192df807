package channel

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"palisade.dev/palisade/config/agentwire"

	"k8s.io/klog/v2"
)

// The server's side of heartbeat datagrams (agentwire's "Heartbeat datagrams" has the wire and
// why): one UDP socket on the HTTPS port's number, read by one goroutine, and per node only the
// key it gave the node's agent. Keys live in the leader's memory: a new leader holds none, its
// agents' datagrams are answered "unknown key", and each agent's next HTTPS exchange gets a
// new one.

// DatagramResults are the outcomes DatagramCounts counts, in this order.
var DatagramResults = []string{"accepted", "exchange", "unknown_key", "unauthenticated", "replayed", "invalid", "malformed"}

const (
	dgAccepted = iota
	dgExchange
	dgUnknownKey
	dgUnauthenticated
	dgReplayed
	dgInvalid
	dgMalformed
)

// datagramKey is one agent's key; s.mu guards lastSeq.
type datagramKey struct {
	id       [agentwire.DatagramKeyIDBytes]byte
	secret   []byte
	mac      *agentwire.DatagramMAC // keyed with secret
	node     string
	notAfter time.Time // the client certificate's over which the key was given
	lastSeq  uint64    // the highest Seq accepted with the key
}

// datagramState is the server's keys by ID and by node, and what each node's agent was last
// told over HTTPS; s.mu guards the maps.
type datagramState struct {
	conn   *net.UDPConn
	byID   map[[agentwire.DatagramKeyIDBytes]byte]*datagramKey
	byNode map[string]*datagramKey
	// told is the hash of the peer targets each node's agent was last answered over HTTPS.
	told   map[string]uint64
	counts [dgMalformed + 1]atomic.Uint64
	// reads counts the socket's batch reads.
	reads atomic.Uint64
}

func newDatagramState() *datagramState {
	return &datagramState{
		byID: map[[agentwire.DatagramKeyIDBytes]byte]*datagramKey{}, byNode: map[string]*datagramKey{}, told: map[string]uint64{},
	}
}

// listenDatagrams opens the UDP socket on the port number the TCP listener got.
func (s *Server) listenDatagrams() error {
	host, _, err := net.SplitHostPort(s.opts.Addr)
	if err != nil {
		return fmt.Errorf("parsing the heartbeat address %s: %w", s.opts.Addr, err)
	}
	port := s.lis.Addr().(*net.TCPAddr).Port
	addr, err := net.ResolveUDPAddr("udp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("resolving the heartbeat datagram address: %w", err)
	}
	conn, err := net.ListenUDP("udp", addr)
	if err != nil {
		return fmt.Errorf("listening for heartbeat datagrams on udp %s: %w", addr, err)
	}
	// Every agent's heartbeat lands in this one socket's buffer; at the kernel's default
	// (208 KiB, about 150 datagrams) a pause of the process of some 30 ms at 5000 agents drops
	// heartbeats (make bench-scale saw 100 000 dropped). The kernel caps the size at
	// net.core.rmem_max.
	if err := conn.SetReadBuffer(DatagramReadBuffer); err != nil {
		s.log.Info("could not enlarge the heartbeat datagram socket's buffer", "error", err.Error())
	}
	s.dg.conn = conn
	return nil
}

// DatagramReadBuffer is the receive buffer asked for the heartbeat datagram socket.
const DatagramReadBuffer = 8 << 20

// datagramReaders read the socket at once: one would leave the buffer to fill whenever the Go
// scheduler or the garbage collector holds it up. Each key's sequence check is atomic, so two
// datagrams of one agent read at once are never both accepted out of order.
const datagramReaders = 2

// datagramBatch is how many datagrams one read takes at most (recvmmsg); their answers go back
// in one write (sendmmsg). Under load the queued datagrams cost one system call each way per
// batch instead of per heartbeat; an idle socket's reads return the one datagram there is.
const datagramBatch = 32

// datagramLinger is how long a reader waits after a read that did not fill its batch before it
// reads again. Heartbeats arrive spread out (5000 agents at 1 s: one every 200 µs), so a reader
// that reads at once mostly reads one, and pays per heartbeat a wake-up and one system call
// each way. Lingering lets them queue: at 5000 agents a read takes about 25, for at most this
// much more latency on a heartbeat interval of seconds. The socket's buffer holds far more than
// a linger's worth (DatagramReadBuffer).
const datagramLinger = 5 * time.Millisecond

// batchConn reads and writes datagrams in batches: the socket's ipv4 or ipv6 PacketConn (their
// Message is one type).
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

func batchConnOf(c *net.UDPConn) batchConn {
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() != nil {
		return ipv4.NewPacketConn(c)
	}
	return ipv6.NewPacketConn(c)
}

// serveDatagrams answers datagrams until the socket is closed.
func (s *Server) serveDatagrams() {
	conn := batchConnOf(s.dg.conn)
	in := make([]ipv4.Message, datagramBatch)
	for i := range in {
		// One byte more than the largest datagram: an oversized one shows.
		in[i].Buffers = [][]byte{make([]byte, agentwire.MaxDatagramBytes+1)}
	}
	out := make([]ipv4.Message, 0, datagramBatch)
	for {
		n, err := conn.ReadBatch(in, 0)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			s.noisy.Info("reading heartbeat datagrams failed", "error", err.Error())
			continue
		}
		now := s.opts.Now()
		out = out[:0]
		for _, m := range in[:n] {
			from, ok := m.Addr.(*net.UDPAddr)
			if !ok {
				continue
			}
			if answer := s.handleDatagram(m.Buffers[0][:m.N], from.AddrPort(), now); answer != nil {
				out = append(out, ipv4.Message{Buffers: [][]byte{answer}, Addr: from})
			}
		}
		s.answerDatagrams(conn, out)
		s.dg.reads.Add(1)
		if n < len(in) {
			time.Sleep(datagramLinger)
		}
	}
}

// answerDatagrams sends the answers; one that fails is logged and skipped.
func (s *Server) answerDatagrams(conn batchConn, out []ipv4.Message) {
	for len(out) > 0 {
		n, err := conn.WriteBatch(out, 0)
		if err != nil {
			// sendmmsg stops at the first message it could not send.
			n = max(n, 0)
			if errors.Is(err, net.ErrClosed) || n >= len(out) {
				return
			}
			s.log.V(1).Info("answering a heartbeat datagram failed", "remote", out[n].Addr.String(), "error", err.Error())
			n++
		} else if n <= 0 {
			return // nothing sent and no error: never seen, but not a loop
		}
		out = out[n:]
	}
}

// handleDatagram accepts one heartbeat datagram received at now and returns the answer, nil
// for none (a datagram nobody authenticated gets none, apart from "unknown key").
func (s *Server) handleDatagram(b []byte, from netip.AddrPort, now time.Time) []byte {
	id, err := agentwire.HeartbeatKeyID(b)
	if err != nil {
		s.dg.counts[dgMalformed].Add(1)
		return nil
	}
	s.mu.RLock()
	k := s.dg.byID[id]
	s.mu.RUnlock()
	if k == nil || now.After(k.notAfter) {
		s.dg.counts[dgUnknownKey].Add(1)
		return agentwire.UnknownKey(id[:])
	}
	payload, err := k.mac.OpenHeartbeat(b)
	if err != nil {
		s.dg.counts[dgUnauthenticated].Add(1)
		s.log.V(1).Info("dropped a heartbeat datagram that failed authentication", "remote", from.String())
		return nil
	}
	var rep agentwire.Report
	err = json.Unmarshal(payload, &rep)
	if err == nil && rep.Node != k.node {
		err = fmt.Errorf("the report names node %q, the key is node %q's", rep.Node, k.node)
	}
	if err == nil {
		err = validate(rep)
	}
	if err != nil {
		// Authenticated, so the agent's own fault: logged (at most linesPerSecond a second).
		s.dg.counts[dgInvalid].Add(1)
		s.noisy.Info("dropped an invalid heartbeat datagram", "Node", klog.KRef("", k.node), "error", err.Error())
		return nil
	}
	s.mu.Lock()
	current := s.dg.byID[id] == k
	replayed := rep.Seq <= k.lastSeq
	if current && !replayed {
		k.lastSeq = rep.Seq
	}
	s.mu.Unlock()
	switch {
	case !current: // replaced while this one was read
		s.dg.counts[dgUnknownKey].Add(1)
		return agentwire.UnknownKey(id[:])
	case replayed:
		s.dg.counts[dgReplayed].Add(1)
		return nil
	}
	// Would the HTTPS answer tell the agent what it was not told: a pending command, another
	// interval, other peers to probe? Then this heartbeat is not recorded: the agent posts it
	// over HTTPS at once, and gets the news.
	resp := s.answer(k.node, rep.IntervalMillis)
	s.mu.RLock()
	_, pending := s.commands[k.node]
	told := s.dg.told[k.node]
	s.mu.RUnlock()
	if pending || resp.IntervalMillis != 0 || peersHash(resp.Peers) != told {
		s.dg.counts[dgExchange].Add(1)
		return k.mac.SealAccepted(id[:], rep.Seq, agentwire.DatagramExchange)
	}
	s.accept(rep, k.node, now, k.notAfter, from.String())
	s.dg.counts[dgAccepted].Add(1)
	return k.mac.SealAccepted(id[:], rep.Seq, 0)
}

// answeredOverHTTPS records what node's agent was answered over HTTPS and, when its Report asked
// for datagrams without naming the node's current key, gives it a new one, valid until
// notAfter (its client certificate's). A new key replaces the node's old one at once.
func (s *Server) answeredOverHTTPS(rep agentwire.Report, node string, notAfter time.Time, resp *agentwire.Response) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dg.told[node] = peersHash(resp.Peers)
	if !rep.Datagrams {
		return nil
	}
	if k := s.dg.byNode[node]; k != nil && bytes.Equal(k.id[:], rep.DatagramKeyID) && k.notAfter.Equal(notAfter) {
		return nil
	}
	k := &datagramKey{node: node, notAfter: notAfter, secret: make([]byte, agentwire.DatagramKeyBytes)}
	if _, err := rand.Read(k.id[:]); err != nil {
		return err
	}
	if _, err := rand.Read(k.secret); err != nil {
		return err
	}
	k.mac = agentwire.NewDatagramMAC(k.secret)
	s.forgetKey(node)
	s.dg.byID[k.id], s.dg.byNode[node] = k, k
	resp.Datagram = &agentwire.DatagramKey{ID: k.id[:], Key: k.secret}
	return nil
}

// forgetKey drops node's key; s.mu must be held for writing.
func (s *Server) forgetKey(node string) {
	if old := s.dg.byNode[node]; old != nil {
		delete(s.dg.byID, old.id)
		delete(s.dg.byNode, node)
	}
}

// DatagramCounts are the heartbeat datagrams received, by outcome (DatagramResults' order).
func (s *Server) DatagramCounts() []uint64 {
	out := make([]uint64, len(s.dg.counts))
	for i := range s.dg.counts {
		out[i] = s.dg.counts[i].Load()
	}
	return out
}

// peersHash is a hash of peer targets, to tell whether an agent was told the current ones.
func peersHash(ts []agentwire.PeerTarget) uint64 {
	h := fnv.New64a()
	for _, t := range ts {
		h.Write([]byte(t.Node))
		h.Write([]byte{0})
		for _, a := range t.Addresses {
			h.Write([]byte(a))
			h.Write([]byte{1})
		}
		h.Write([]byte{2})
	}
	return h.Sum64()
}
