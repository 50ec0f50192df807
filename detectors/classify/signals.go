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
	case hb.age > interval+interval/2:
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
	stale                 int
	lastReached           time.Time
	// failedSince counts the peers whose latest fresh report, made after the time given to
	// peers (the agent's last heartbeat), failed to reach the node.
	failedSince int
}

func (c Config) peers(reports []PeerReport, now, since time.Time) peerView {
	latestOf := make(map[string]PeerReport, len(reports))
	for _, r := range reports {
		key := r.From
		if r.Inbound {
			// The node's probe of the peer: a path of its own, apart from the peer's probes.
			key += " (the node's probe)"
		}
		if cur, ok := latestOf[key]; !ok || r.At.After(cur.At) {
			latestOf[key] = r
		}
	}
	var v peerView
	for from, r := range latestOf {
		switch {
		case now.Sub(r.At) > c.PeerStaleness:
			v.stale++
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
	return v
}

func (v peerView) String() string {
	var parts []string
	if len(v.reaching) > 0 {
		parts = append(parts, "reached by ["+strings.Join(v.reaching, " ")+"]")
	}
	if len(v.notReaching) > 0 {
		parts = append(parts, "not reached by ["+strings.Join(v.notReaching, " ")+"]")
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
