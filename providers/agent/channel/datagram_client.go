package channel

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"palisade.dev/palisade/config/agentwire"

	"github.com/go-logr/logr"
)

// The agent's side of heartbeat datagrams (agentwire's "Heartbeat datagrams").

const (
	// datagramMisses unanswered datagrams in a row pause datagrams for datagramPause: a network
	// that drops UDP (a firewall, a NetworkPolicy) then costs one wait per minute, not one per
	// heartbeat. Every unanswered heartbeat still goes over HTTPS at once.
	datagramMisses = 3
	datagramPause  = time.Minute
)

// clientDatagrams is an agent's datagram key and socket, and the peers it was last told.
type clientDatagrams struct {
	address string
	timeout time.Duration
	log     logr.Logger

	mu     sync.Mutex
	conn   *net.UDPConn // connected to address; nil until the first datagram
	key    *agentwire.DatagramKey
	peers  []agentwire.PeerTarget
	misses int
	paused time.Time // no datagrams before this time
}

// heartbeat sends rep as a datagram and waits for the controller's answer, for at most half of
// ctx's time. It names the key it holds in rep (so that an HTTPS post of rep, if one follows,
// gets a new key only when the controller does not hold this one), and is true when the
// controller accepted rep and has nothing new: the answer is then the peers last told.
//
// With post set it only names the key: the caller posts rep over HTTPS.
func (d *clientDatagrams) heartbeat(ctx context.Context, rep *agentwire.Report, post bool) (agentwire.Response, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.key == nil {
		return agentwire.Response{}, false
	}
	rep.DatagramKeyID = d.key.ID
	now := time.Now()
	if post || now.Before(d.paused) {
		return agentwire.Response{}, false
	}
	payload, err := json.Marshal(rep)
	if err != nil {
		return agentwire.Response{}, false
	}
	b, fits := agentwire.SealHeartbeat(d.key.ID, d.key.Key, payload)
	if !fits {
		return agentwire.Response{}, false
	}
	if d.conn == nil {
		addr, err := net.ResolveUDPAddr("udp", d.address)
		if err == nil {
			d.conn, err = net.DialUDP("udp", nil, addr)
		}
		if err != nil {
			d.miss(now, err)
			return agentwire.Response{}, false
		}
	}
	wait := d.timeout
	if deadline, ok := ctx.Deadline(); ok {
		wait = deadline.Sub(now)
	}
	_ = d.conn.SetDeadline(now.Add(wait / 2))
	if _, err := d.conn.Write(b); err != nil {
		d.miss(now, err)
		return agentwire.Response{}, false
	}
	buf := make([]byte, 128)
	for {
		n, err := d.conn.Read(buf)
		if err != nil {
			d.miss(now, err)
			return agentwire.Response{}, false
		}
		a, err := agentwire.OpenAnswer(buf[:n], d.key.ID, d.key.Key)
		switch {
		case err != nil || (!a.UnknownKey && a.Seq != rep.Seq):
			continue // not an answer to this heartbeat (a late one to an earlier beat)
		case a.UnknownKey:
			// The controller does not hold the key (a new leader): the HTTPS post gets a new one.
			d.misses = 0
			return agentwire.Response{}, false
		}
		d.misses = 0
		if a.Flags&agentwire.DatagramExchange != 0 {
			return agentwire.Response{}, false // the controller has news: post at once
		}
		return agentwire.Response{Peers: d.peers}, true
	}
}

// miss counts an unanswered datagram, and pauses datagrams after datagramMisses in a row.
func (d *clientDatagrams) miss(now time.Time, err error) {
	d.misses++
	if d.misses < datagramMisses {
		return
	}
	d.misses = 0
	d.paused = now.Add(datagramPause)
	if d.conn != nil {
		_ = d.conn.Close()
		d.conn = nil // resolved and dialed again after the pause
	}
	reason := err.Error()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		reason = "no answer"
	}
	d.log.Info("heartbeat datagrams go unanswered: heartbeats go over HTTPS only, for a while",
		"misses", datagramMisses, "reason", reason, "retryAfter", datagramPause.String())
}

// answered takes what an HTTPS answer told: the peers, and a new key.
func (d *clientDatagrams) answered(resp agentwire.Response) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.peers = resp.Peers
	if k := resp.Datagram; k != nil && len(k.ID) == agentwire.DatagramKeyIDBytes && len(k.Key) == agentwire.DatagramKeyBytes {
		if d.key == nil {
			d.log.Info("heartbeats go as datagrams from now on", "address", d.address)
		}
		d.key = k
	}
}

// flowing says whether heartbeats go as datagrams: a key held, datagrams not paused.
func (d *clientDatagrams) flowing() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.key != nil && !time.Now().Before(d.paused)
}

func (d *clientDatagrams) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		_ = d.conn.Close()
		d.conn = nil
	}
}
