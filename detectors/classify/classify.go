package classify

import (
	"fmt"
	"time"

	"palisade.dev/palisade/detectors"
)

const (
	// DefaultMissedHeartbeats is how many agent heartbeat intervals may pass without a heartbeat
	// before the agent counts as lost.
	DefaultMissedHeartbeats = 3
	// DefaultInterval is the agent heartbeat interval assumed when an agent states none.
	DefaultInterval = time.Second
	// DefaultPeerStaleness is how old a peer report may be before it is ignored.
	DefaultPeerStaleness = 10 * time.Second
	// RenewalMargin is how late past its interval a Lease renewal may be seen before it counts
	// as missed, at the least: the kubelet's jitter (up to 4 %) and the watch's delivery.
	RenewalMargin = time.Second
	// LatenessFactor is how many times the lateness the controller has seen renewals come
	// with lately (Signals.LeaseRenewalLateness) a renewal may be late before it counts as
	// missed, when that is more than RenewalMargin: on a loaded API server renewals come
	// seconds late, and a node still renewing must not read Dead for it.
	LatenessFactor = 2
)

// Agent is what the controller knows of a node's agent from its direct heartbeats.
type Agent struct {
	// LastSeen is when the controller received the latest heartbeat, on the controller's clock;
	// zero when the node's agent never reported.
	LastSeen time.Time
	// Interval is the agent's heartbeat interval; zero means DefaultInterval.
	Interval time.Duration
	// KubeletHealthy is the agent's view of its kubelet in the latest heartbeat.
	KubeletHealthy bool
}

// PeerReport is one peer's word on whether it can reach the node.
type PeerReport struct {
	// From names the reporting peer.
	From string
	// Reachable says whether the peer's probe reached the node.
	Reachable bool
	// At is when the peer probed, on the controller's clock.
	At time.Time
	// Inbound says the node probed the peer instead, and the peer's agent acknowledged at At
	// (Reachable is true): the node is alive and reaches that peer, and its agent counts that
	// path, so the controller must count it too (a self-fence is not relied on while it holds).
	// The latest report counts per peer and direction.
	Inbound bool
	// Interval is the reporting peer's heartbeat interval (0: DefaultInterval): with the
	// node's own, it sets how old a report may grow before it is stale (Config.PeerStaleness).
	Interval time.Duration
}

// Signals are the independent views of one node at one moment.
type Signals struct {
	Node string
	// Lease is the lease detector's observation: the API server's view.
	Lease detectors.Observation
	// Agent is the node agent's direct heartbeat to the controller.
	Agent Agent
	// Peers are the reports of the node's peers, any number per peer; the latest of each counts.
	Peers []PeerReport
	// LeaseRenewalSeen is when the controller, on its own clock, first saw the Lease's latest
	// renewal; zero when unknown. A renewal seen after the agent's last heartbeat means the
	// kubelet still reaches the API server, so the node is not dead whatever the agent and
	// peers say.
	LeaseRenewalSeen time.Time
	// LeaseRenewInterval is how often the node's kubelet renews its Lease (a quarter of the
	// Lease's duration, lease.RenewInterval); zero means
	// detectors.DefaultLeaseRenewInterval.
	LeaseRenewInterval time.Duration
	// LeaseSeeingSince is since when the controller could see Lease renewals (zero: always).
	// After it was blind (the API server down, its own access to it cut), a kubelet that could
	// not renew either gets a whole renewal interval from then before its renewal counts as
	// missed: the renewal last seen before the blindness says nothing of the time since.
	LeaseSeeingSince time.Time
	// LeaseRenewalLateness is how late past their interval the controller has seen renewals
	// come lately, this node's and the cluster's (lease.Renewals.Lateness): the renewal is
	// counted missed only LatenessFactor times that late, RenewalMargin at the least.
	LeaseRenewalLateness time.Duration
}

// RenewalMarginFor is how late past its interval a renewal may be seen before it counts as
// missed, when renewals have come lateness late lately: LatenessFactor times that, and
// RenewalMargin at the least.
func RenewalMarginFor(lateness time.Duration) time.Duration {
	return max(RenewalMargin, LatenessFactor*lateness)
}

// Config holds the thresholds. The zero value means the defaults.
type Config struct {
	// MissedHeartbeats is how many heartbeat intervals may pass before the agent is lost.
	MissedHeartbeats int
	// PeerStaleness is how old a peer report may be before it is ignored; never less than
	// MissedHeartbeats of the longer of the reporter's interval and the node's, which is how
	// far apart the reports of a path may come (the peer probes and reports once per its
	// interval, the node probes once per its own).
	PeerStaleness time.Duration
	// HeartbeatsSince is when the controller began receiving heartbeats. Until one heartbeat
	// timeout has passed since, an agent it has not heard from may just not have reported yet,
	// so a stale Lease makes its node Suspect rather than Dead. Zero disables this warm-up.
	HeartbeatsSince time.Time
	// MinPeerReports is how many peers must have failed to reach the node since its agent went
	// silent before the node counts as Dead while its Lease has not yet expired; default 1.
	MinPeerReports int
}

func (c Config) withDefaults() Config {
	if c.MissedHeartbeats <= 0 {
		c.MissedHeartbeats = DefaultMissedHeartbeats
	}
	if c.PeerStaleness <= 0 {
		c.PeerStaleness = DefaultPeerStaleness
	}
	if c.MinPeerReports <= 0 {
		c.MinPeerReports = 1
	}
	return c
}

// Classify combines the signals of one node into an Observation:
//
//   - a fresh Lease: Healthy; a late one: Suspect (the API server still hears the kubelet);
//     a fresh one whose agent's heartbeat is late or lost, with no renewal seen since: Suspect
//     too, so that the storm guard counts the nodes of a storm before the first is fenced;
//   - a stale Lease and fresh agent heartbeats: KubeletDown when the agent reports its kubelet
//     unhealthy, else Partitioned (alive, cut off from the control plane);
//   - a stale Lease and late agent heartbeats: Suspect until the agent counts as lost;
//   - a stale Lease, no agent heartbeat, and a fresh peer report that reaches the node (a peer's
//     probe of it, or its probe of a peer that the peer's agent acknowledged): Partitioned; no
//     fresh peer report reaching it: Dead;
//   - a node whose agent never reported: the Lease verdict alone (unless a fresh peer report
//     reaches it, which makes it Partitioned), and the Reason says so;
//   - before the Lease expires: Dead when every path is silent — the agent lost, no fresh peer
//     report reaching the node and at least MinPeerReports peers failing to reach it since the
//     agent's last heartbeat, no Lease renewal seen after the agent's next heartbeat was due,
//     and the kubelet's next renewal missed: none seen RenewalMarginFor(the lateness renewals
//     came with lately) past its interval after the last. A renewal seen after the silence keeps the Lease's verdict: the kubelet still
//     reaches the API server, the signals disagree, so no blind power-off (invariant 4). Until
//     the next renewal is due the Lease has not spoken yet: a node whose agent died and whose
//     peers are cut from it may well be renewing on time, so it is not Dead either. While the
//     agent is lost and the node not Dead, Deadline is at most one heartbeat interval away, so
//     that the caller looks again as peer reports and the renewal's due time arrive.
//
// So the Dead before the Lease's expiry comes one renewal interval plus the margin after the
// last renewal the controller saw (11 s by default on a quiet cluster, against the Lease's
// 40 s), and never to a node whose kubelet renews on time. The margin grows with the lateness
// renewals came with lately (a loaded API server, a slow path to it), so that a renewal as late
// as they are is not taken for a missed one. Its price: a node cut off from the controller and
// from every peer, whose kubelet's renewal is later than twice that while it still reaches the
// API server, counts as Dead and is fenced by a confirmed power-off: never unsafe, but a fence
// of a node that one path still reached late.
func Classify(s Signals, cfg Config, now time.Time) detectors.Observation {
	cfg = cfg.withDefaults()
	lease := s.Lease
	if lease.Verdict == "" {
		lease.Verdict, lease.Reason = detectors.Suspect, "no Lease observation"
	}
	hb := cfg.heartbeat(s.Agent, now)
	peers := cfg.peers(s.Peers, now, s.Agent.LastSeen, s.Agent.Interval)
	obs := detectors.Observation{
		Node:     s.Node,
		LastSeen: latest(lease.LastSeen, s.Agent.LastSeen, peers.lastReached),
		Deadline: lease.Deadline,
		// The Lease's own expiry, until an agent signal below sets a nearer look.
		LeaseExpiry: lease.LeaseExpiry,
		Timeout:     lease.Timeout,
	}
	if !obs.LastSeen.IsZero() {
		obs.Age = now.Sub(obs.LastSeen)
	}
	var summary string
	obs.Verdict, summary = decide(lease.Verdict, hb, peers)
	if !lease.Verdict.Failed() && hb.state == lost {
		// A renewal seen before the agent's next heartbeat was due is no sign of life after the
		// silence: the kubelet's last renewal and the agent's missing heartbeat fit one moment of
		// death. A renewal seen later is: the kubelet still reaches the API server.
		silentLease := !s.LeaseRenewalSeen.IsZero() && !renewedAfterSilence(s, hb)
		every := s.LeaseRenewInterval
		if every <= 0 {
			every = detectors.DefaultLeaseRenewInterval
		}
		// The renewal is due an interval after the one seen last, or after the controller could
		// see again when that is later.
		from, since := s.LeaseRenewalSeen, ""
		if s.LeaseSeeingSince.After(from) {
			from = s.LeaseSeeingSince
			since = fmt.Sprintf(", counted from %s when the controller could see renewals again", s.LeaseSeeingSince.UTC().Format(time.RFC3339))
		}
		margin := RenewalMarginFor(s.LeaseRenewalLateness)
		if margin > RenewalMargin {
			since += fmt.Sprintf(", allowed %s late as renewals came up to %s late lately", margin.Round(time.Millisecond), s.LeaseRenewalLateness.Round(time.Millisecond))
		}
		renewalDue := from.Add(every + margin)
		silentPeers := !peers.alive() && peers.failedSince >= cfg.MinPeerReports
		switch {
		case silentLease && silentPeers && !now.Before(renewalDue):
			obs.Verdict = detectors.Dead
			summary = fmt.Sprintf("dead: agent heartbeat lost, %d peer(s) cannot reach the node since its last heartbeat, none can, and the kubelet missed its Lease renewal (none seen for %s, renewed every %s%s; Lease not yet expired)",
				peers.failedSince, now.Sub(s.LeaseRenewalSeen).Round(time.Millisecond), every, since)
		case silentLease && silentPeers:
			summary += fmt.Sprintf("; agent lost and no peer reaches the node, but the kubelet's next Lease renewal is not due until %s (renewed every %s%s): waiting for it",
				renewalDue.UTC().Format(time.RFC3339), every, since)
			obs.Deadline, obs.LeaseExpiry = earliest(obs.Deadline, renewalDue), false
		case silentLease && !peers.alive():
			summary += fmt.Sprintf("; agent lost: waiting for %d peer report(s) made since its last heartbeat", cfg.MinPeerReports)
		case !silentLease && !s.LeaseRenewalSeen.IsZero():
			summary += "; agent lost, but the Lease was renewed since its last heartbeat: the kubelet reaches the API server"
		}
		if obs.Verdict != detectors.Dead {
			// Peer reports keep arriving with the peers' heartbeats: look again in an interval.
			obs.Deadline, obs.LeaseExpiry = earliest(obs.Deadline, now.Add(hb.interval)), false
		}
	}
	if obs.Verdict == detectors.Healthy && (hb.state == late || hb.state == lost) && !renewedAfterSilence(s, hb) {
		// Late, for the storm guard: nodes that go silent together (a rack's power, a switch)
		// fall Dead one by one as each misses its next renewal, up to a renewal interval apart,
		// and a Lease renewed seconds before the silence still reads fresh when the first of
		// them is fenced. What they share at once is their agents' silence.
		obs.Verdict = detectors.Suspect
		summary += "; late (Suspect): its agent is silent and no Lease renewal was seen since"
	}
	if obs.Verdict == detectors.Suspect && lease.Verdict.Failed() {
		obs.Deadline, obs.LeaseExpiry = hb.deadline, false
	}
	obs.Reason = fmt.Sprintf("%s; API: %s; agent: %s; peers: %s", summary, lease.Reason, hb, peers)
	return obs
}

// renewedAfterSilence says whether the controller saw a Lease renewal after the agent's next
// heartbeat was due: the kubelet still reached the API server once the agent was silent. A
// renewal seen before that fits one moment of death with the agent's silence.
func renewedAfterSilence(s Signals, hb heartbeat) bool {
	nextDue := s.Agent.LastSeen.Add(hb.interval + hb.interval/2)
	return !s.LeaseRenewalSeen.IsZero() && s.LeaseRenewalSeen.After(nextDue)
}

// decide applies the rules of Classify and returns the verdict with a summary of why.
func decide(api detectors.Verdict, hb heartbeat, p peerView) (detectors.Verdict, string) {
	switch {
	case !api.Failed() && hb.state == never:
		return api, "no agent heartbeat ever received, verdict from the Lease alone"
	case api == detectors.Healthy:
		return api, "Lease fresh"
	case !api.Failed():
		return detectors.Suspect, "Lease late"
	case hb.state == fresh && !hb.kubeletHealthy:
		return detectors.KubeletDown, "kubelet down: Lease expired, agent heartbeats fresh and the agent reports its kubelet unhealthy"
	case hb.state == fresh:
		return detectors.Partitioned, "partitioned: Lease expired but agent heartbeats fresh and kubelet healthy (alive, cut off from the API server)"
	case hb.state == late:
		return detectors.Suspect, "Lease expired, agent heartbeat late"
	case p.alive():
		return detectors.Partitioned, "partitioned: Lease expired and no agent heartbeat, but peers reach the node or it reaches them (alive, cut off from the API server and the controller)"
	case hb.state == warmingUp:
		return detectors.Suspect, "Lease expired, controller still waiting for the first agent heartbeats"
	case hb.state == never:
		return detectors.Dead, "no agent heartbeat ever received, verdict from the Lease alone (and no fresh peer report reaches the node)"
	default:
		return detectors.Dead, "dead: Lease expired, agent heartbeat lost and no fresh peer report reaches the node"
	}
}

// earliest is the earlier of a and b, ignoring zero times.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func latest(ts ...time.Time) time.Time {
	var max time.Time
	for _, t := range ts {
		if t.After(max) {
			max = t
		}
	}
	return max
}
