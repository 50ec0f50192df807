package channel

import (
	"time"

	"palisade.dev/palisade/config/agentwire"
)

// sendClock places one node's heartbeats on the server's clock by when they were sent
// (Heartbeat.Sent). A heartbeat's arrival minus its SentAt is the two clocks' offset plus the
// time it spent on the way; the least of these among the node's recent heartbeats is the offset
// plus the shortest delay, so SentAt plus that least is when it was sent, late by at most that
// shortest delay. A heartbeat delayed for seconds (TCP retransmitting a request sent during a
// partition) does not lower the least, and reads as sent when it was.
//
// The least is kept over the last sendClockHalf to 2×sendClockHalf heartbeats (two halves), so
// that it follows the agent's clock as it drifts. The node's clock stepped forward lowers it at
// once (placed right); stepped back, the old least stays until its half ages out, and heartbeats
// read as sent earlier than they were: a read-back from after a window's end is then taken as
// from before it for that long, which holds a release, never hastens one. The window is the
// node's, across agent restarts and boots: the clock is the machine's, and a new agent's first
// heartbeat may be one the network held back as well.
type sendClock struct {
	cur, prev time.Duration // the least arrival-minus-SentAt of this half and of the last
	n         int           // heartbeats in this half
	hasPrev   bool
}

// sendClockHalf is how many heartbeats each half of a sendClock's window holds: at the default
// 1 s interval the least is taken over the last 32 to 64 seconds of heartbeats received.
const sendClockHalf = 32

// sent records hb's arrival-minus-SentAt and returns when hb was sent on the server's clock;
// zero when hb states no SentAt or the node had no earlier heartbeat with one to compare with.
func (c *sendClock) sent(hb agentwire.Heartbeat) time.Time {
	if hb.SentAt.IsZero() {
		return time.Time{}
	}
	d := hb.Received.Sub(hb.SentAt)
	first := c.n == 0 && !c.hasPrev
	switch {
	case first:
		c.cur, c.n = d, 1
	case c.n == sendClockHalf:
		c.prev, c.hasPrev, c.cur, c.n = c.cur, true, d, 1
	default:
		c.cur, c.n = min(c.cur, d), c.n+1
	}
	if first {
		return time.Time{} // nothing to tell its delay by: it may be one the network held back
	}
	least := c.cur
	if c.hasPrev {
		least = min(least, c.prev)
	}
	return hb.SentAt.Add(least)
}
