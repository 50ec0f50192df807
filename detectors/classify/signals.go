package classify

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

type heartbeatState int

const (
	never     heartbeatState = iota // no heartbeat ever received
	warmingUp                       // none received yet, but the controller has only just begun listening
	fresh                           // at most one interval late (with half an interval of slack)
	late                            // missed at least one, not yet lost
	lost                            // missed MissedHeartbeats intervals
)

// heartbeat is the state of a node agent's direct heartbeats.
type heartbeat struct {
	state          heartbeatState
	age, timeout   time.Duration
	interval       time.Duration
	deadline       time.Time // when the agent counts as lost
	kubeletHealthy bool
}

// LostAfter is how long an agent that heartbeats every interval (0: DefaultInterval) may be
// silent before it counts as lost: MissedHeartbeats of its intervals (0: the default).
func (c Config) LostAfter(interval time.Duration) time.Duration {
	return time.Duration(c.withDefaults().MissedHeartbeats) * orDefaultInterval(interval)
}

// LateAfter is how long an agent that heartbeats every interval (0: DefaultInterval) may be
// silent before its heartbeat counts as late: one interval and half of one.
func (c Config) LateAfter(interval time.Duration) time.Duration {
	interval = orDefaultInterval(interval)
	return interval + interval/2
}

// JudgedInterval is the interval node's agent, whose latest heartbeat reports reported, is
// judged by (its misses, and the staleness of the peer reports it carries), while the
// controller asks it for asked(node) (asked nil, or 0: nothing asked): the longer of the two,
// until a heartbeat reports the asked one.
// An agent asked for a longer interval adopts it on the controller's answer and sends its next
// heartbeat one new interval later, so three of the reported, shorter ones would have it lost
// (and a Partitioned node Dead) while it is alive. Asked for a shorter one, it sends at the old
// interval until it hears the answer, so the reported one still holds. The longer is
// conservative toward not fencing: an agent silent for good counts as lost no sooner than
// under either interval (a raise makes a dead agent's loss wait three of the new intervals).
func JudgedInterval(node string, reported time.Duration, asked func(node string) time.Duration) time.Duration {
	if asked == nil {
		return reported
	}
	return max(reported, asked(node))
}

func orDefaultInterval(interval time.Duration) time.Duration {
	if interval <= 0 {
		return DefaultInterval
	}
	return interval
}

func (c Config) heartbeat(a Agent, now time.Time) heartbeat {
	interval := orDefaultInterval(a.Interval)
	hb := heartbeat{timeout: c.LostAfter(interval), interval: interval, kubeletHealthy: a.KubeletHealthy}
	if a.LastSeen.IsZero() {
		hb.state = never
		if !c.HeartbeatsSince.IsZero() && now.Sub(c.HeartbeatsSince) <= hb.timeout {
			hb.state, hb.deadline = warmingUp, c.HeartbeatsSince.Add(hb.timeout)
		}
		return hb
	}
	hb.age, hb.deadline = now.Sub(a.LastSeen), a.LastSeen.Add(hb.timeout)
	switch {
	case hb.age > hb.timeout:
		hb.state = lost
	case hb.age > c.LateAfter(interval):
		hb.state = late
	default:
		hb.state = fresh
	}
	return hb
}

func (hb heartbeat) String() string {
	switch hb.state {
	case never:
		return "no heartbeat ever received"
	case warmingUp:
		return fmt.Sprintf("no heartbeat yet, controller listening for less than %s", hb.timeout)
	case lost:
		return fmt.Sprintf("no heartbeat for %s (lost after %s)", round(hb.age), hb.timeout)
	}
	kubelet := "kubelet healthy"
	if !hb.kubeletHealthy {
		kubelet = "kubelet unhealthy"
	}
	return fmt.Sprintf("last heartbeat %s ago (lost after %s), %s", round(hb.age), hb.timeout, kubelet)
}

// peerView is the latest fresh report of every peer.
type peerView struct {
	reaching, notReaching []string
	// reaches are the peers whose agents acknowledged the node's own probes: it reaches them.
	reaches     []string
	stale       int
	lastReached time.Time
	// failedSince counts the peers whose latest fresh report, made after the time given to
	// peers (the agent's last heartbeat), failed to reach the node.
	failedSince int
}

// staleAfter is how old a report of a peer heartbeating every reporter may grow, about a node
// heartbeating every own (0s: DefaultInterval), before it is stale.
func (c Config) staleAfter(reporter, own time.Duration) time.Duration {
	return max(c.PeerStaleness, c.LostAfter(max(orDefaultInterval(reporter), orDefaultInterval(own))))
}

func (c Config) peers(reports []PeerReport, now, since time.Time, own time.Duration) peerView {
	// The latest report counts per peer and direction: the node's probe of a peer is a path of
	// its own, apart from the peer's probes of the node.
	type key struct {
		from    string
		inbound bool
	}
	latestOf := make(map[key]PeerReport, len(reports))
	for _, r := range reports {
		k := key{r.From, r.Inbound}
		if cur, ok := latestOf[k]; !ok || r.At.After(cur.At) {
			latestOf[k] = r
		}
	}
	var v peerView
	for k, r := range latestOf {
		from := k.from
		switch {
		case now.Sub(r.At) > c.staleAfter(r.Interval, own):
			v.stale++
		case r.Inbound:
			v.reaches = append(v.reaches, from)
			v.lastReached = latest(v.lastReached, r.At)
		case r.Reachable:
			v.reaching = append(v.reaching, from)
			v.lastReached = latest(v.lastReached, r.At)
		default:
			v.notReaching = append(v.notReaching, from)
			if !since.IsZero() && r.At.After(since) {
				v.failedSince++
			}
		}
	}
	sort.Strings(v.reaching)
	sort.Strings(v.notReaching)
	sort.Strings(v.reaches)
	return v
}

// alive says whether a fresh report shows the node alive on a path: a peer reached it, or it
// reached a peer.
func (v peerView) alive() bool { return len(v.reaching) > 0 || len(v.reaches) > 0 }

func (v peerView) String() string {
	var parts []string
	if len(v.reaching) > 0 {
		parts = append(parts, "reached by ["+strings.Join(v.reaching, " ")+"]")
	}
	if len(v.notReaching) > 0 {
		parts = append(parts, "not reached by ["+strings.Join(v.notReaching, " ")+"]")
	}
	if len(v.reaches) > 0 {
		parts = append(parts, "reaches ["+strings.Join(v.reaches, " ")+"]")
	}
	if len(parts) == 0 {
		parts = append(parts, "no fresh report")
	}
	if v.stale > 0 {
		parts = append(parts, fmt.Sprintf("%d stale ignored", v.stale))
	}
	return strings.Join(parts, ", ")
}

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
