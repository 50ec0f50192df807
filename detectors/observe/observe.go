package observe

import (
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/classify"
	"palisade.dev/palisade/detectors/lease"
)

// Heartbeats is the source of the node agents' direct heartbeats (the controller's end of the
// agent channel).
type Heartbeats interface {
	// Snapshot is a copy of every node's latest heartbeat, for a pass over all nodes.
	Snapshot() map[string]agentwire.Heartbeat
	// Latest is one node's latest heartbeat and every peer's latest report about it, for a
	// look at one node (agentwire.LatestOf says what it returns).
	Latest(node string) (hb agentwire.Heartbeat, about []agentwire.Sighting, ok bool)
	// EachReceived calls fn with every node's latest heartbeat's arrival time and interval,
	// without copying the heartbeats, for a frequent look at all nodes; fn must be quick and
	// must not call back into the source.
	EachReceived(fn func(node string, received time.Time, interval time.Duration))
	// LastReached is the latest moment a peer's agent reported acknowledging the node's probe,
	// over every heartbeat received, not only the latest ones (zero for none).
	LastReached(node string) time.Time
}

// Observer asks the detectors about a node: the lease detector always, and the classifier
// over the agents' heartbeats and peer reports when Heartbeats is set.
type Observer struct {
	Reader     client.Reader
	Heartbeats Heartbeats
	// Since is when the controller began listening for heartbeats (the classifier's warm-up).
	Since time.Time
	// Renewals, when set, records when the controller saw each Lease renewal, so that the
	// classifier can tell a node silent on every path before its Lease expires. Shared by all
	// copies of the Observer.
	Renewals *lease.Renewals
	// Sight, when set, says since when the controller could see renewals: a Lease's age and
	// the agents' warm-up count only from then (invariant 3).
	Sight Sight
	// IntervalFor, when set, is the heartbeat interval the controller asks of each node's agent
	// (its policy's detection.heartbeatInterval): an agent not heard yet since the controller
	// began to listen (a restart, a new leader) gets its warm-up, three of those intervals, not
	// three of the default's; a heard agent, and the peer reports it carries, are judged by the
	// longer of it and the interval its latest heartbeat reports (classify.JudgedInterval).
	// Nil: the intervals the heartbeats report, else the default.
	IntervalFor func(node string) time.Duration
}

// Sight is the controller's own view of whether it can see fresh signals (detectors/sight).
type Sight interface {
	// Since is the moment since which the controller has seen without a gap (zero: always).
	Since() time.Time
	// Cause says why sight began then (the cause of the last loss, or the start).
	Cause() string
}

// Observe is the detectors' verdict on one node, its Lease judged against leaseTimeout.
// It reads only that node's agent signals (O(peers)), however many nodes there are.
func (o Observer) Observe(ctx context.Context, node *corev1.Node, leaseTimeout time.Duration, now time.Time) (detectors.Observation, error) {
	var sig signalsOf
	if o.Heartbeats != nil {
		sig = func(name string) (classify.Agent, []classify.PeerReport) {
			hb, about, ok := o.Heartbeats.Latest(name)
			var a classify.Agent
			if ok {
				a = agentOf(hb)
			}
			return a, sightings(about)
		}
	}
	l, err := o.lease(ctx, node.Name)
	if err != nil {
		return detectors.Observation{}, err
	}
	return o.observeWith(node, l, leaseTimeout, now, sig), nil
}

// ObserveAll observes every node from one snapshot of the agents' heartbeats: O(nodes × peers)
// for the whole pass rather than per node.
func (o Observer) ObserveAll(ctx context.Context, nodes []corev1.Node, leaseTimeout time.Duration, now time.Time) ([]detectors.Observation, error) {
	var sig signalsOf
	if o.Heartbeats != nil {
		agents, peers := Signals(o.Heartbeats.Snapshot())
		sig = func(name string) (classify.Agent, []classify.PeerReport) { return agents[name], peers[name] }
	}
	// One read of every node Lease (the cache's own objects, read only) rather than one per node.
	var list coordinationv1.LeaseList
	if err := o.Reader.List(ctx, &list, client.InNamespace(lease.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing node leases: %w", err)
	}
	leases := make(map[string]*coordinationv1.Lease, len(list.Items))
	for i := range list.Items {
		leases[list.Items[i].Name] = &list.Items[i]
	}
	out := make([]detectors.Observation, 0, len(nodes))
	for i := range nodes {
		out = append(out, o.observeWith(&nodes[i], leases[nodes[i].Name], leaseTimeout, now, sig))
	}
	return out, nil
}

// LastSignal is the time of the freshest signal from the node on any path the controller has
// (Lease, agent heartbeat, fresh peer reports, and the latest acknowledgement of the node's
// probe by a peer ever reported); zero when there is none. The last is kept beyond the peers'
// latest heartbeats: the node's agent counts an acknowledged probe as a path for two of its
// intervals, whatever the peer's interval and however soon the peer stops reporting it.
//
// A signal still in flight when the SelfFence method confirms is not seen: its safeAfter must
// leave room for a peer's heartbeat interval besides the node's own delays.
func (o Observer) LastSignal(ctx context.Context, name string, now time.Time) (time.Time, error) {
	node := &corev1.Node{}
	if err := o.Reader.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if !apierrors.IsNotFound(err) {
			return time.Time{}, fmt.Errorf("reading node %s: %w", name, err)
		}
		node.Name = name
	}
	// The lease timeout does not move the freshest signal; any value will do.
	obs, err := o.Observe(ctx, node, time.Minute, now)
	last := obs.LastSeen
	if o.Heartbeats != nil {
		if r := o.Heartbeats.LastReached(name); r.After(last) {
			last = r
		}
	}
	return last, err
}

// SilentAgents names, sorted, the nodes other than node whose agent the controller has heard
// but whose heartbeat is now late or lost, at now, by the classifier's rule
// (classify.Config.LateAfter: more than one and a half of its intervals): not lost only, which
// takes three intervals, up to 3 minutes at the longest interval, while an agent of an island
// may go on acknowledging its neighbours' probes unheard. Nodes whose agent it never heard are
// not named. Empty without agents.
func (o Observer) SilentAgents(node string, now time.Time) []string {
	if o.Heartbeats == nil {
		return nil
	}
	var out []string
	late := classify.Config{}
	o.Heartbeats.EachReceived(func(n string, received time.Time, interval time.Duration) {
		if n != node && !received.IsZero() && now.Sub(received) > late.LateAfter(interval) {
			out = append(out, n)
		}
	})
	slices.Sort(out)
	return out
}

// ChannelSilence is what the agents of the other nodes say of the controller's heartbeat
// channel (AgentsOfLiveNodesSilent).
type ChannelSilence struct {
	// Silent names, sorted, the nodes whose agent is silent to the controller while their
	// kubelet renewed its Lease after that agent's next heartbeat was due (a renewal the
	// controller saw replace an earlier one): alive to the API server, silent to the controller.
	Silent []string
	// Pending names, sorted, the nodes that cannot be judged yet: an agent not heard yet whose
	// heartbeats may still come (the controller has listened less than three of its
	// intervals); an agent not late yet by its own interval but not heard since the node's own
	// silence began; or a silent agent whose kubelet renewed nothing since but whose next
	// renewal may still come (one renewal interval and the margin after the agent's next
	// heartbeat was due). Such a node may turn out silent to the controller alone, so it weighs
	// as silent until it can be judged.
	Pending []string
	// Judged counts the nodes judged by, the pending among them: every node that runs an
	// agent but those silent on every path (the agent silent, the kubelet's next renewal
	// missed: a machine off, or cut off altogether, whose silence says nothing of the channel).
	Judged int
	// Unheard names, sorted, the silent nodes that were marked as running an agent but whose
	// agent the controller has not heard since it began to listen.
	Unheard []string
}

// AgentsOfLiveNodesSilent tells whether the controller's heartbeat channel, rather than the
// agents, looks silent, judged by the nodes other than node that run an agent: those whose
// agent it has heard since it began to listen, and those of marked (nodes known to run one,
// v1alpha1.AnnotationAgent) whose agent it has not heard yet. An agent heard is silent once its
// heartbeat is late by the interval it is judged by (classify.JudgedInterval: the longer of the
// one it reports and the one asked of it); one not heard yet, once the controller has listened
// three of its intervals; and the nodes that cannot be judged yet are Pending. A controller
// that starts, or takes over leadership, while the channel is cut has heard no agent: without
// marked it could not tell. runsAgent, when set, leaves out the nodes it says no longer run an
// agent (no agent pod for them): their agent is gone, not silent.
func (o Observer) AgentsOfLiveNodesSilent(node string, now time.Time, marked []string, runsAgent func(node string) bool) ChannelSilence {
	var cs ChannelSilence
	if o.Heartbeats == nil {
		return cs
	}
	unheard := map[string]bool{}
	// The node's own silence began with its agent's last heartbeat: an agent heard last before
	// that, and not late yet by its own interval, may have fallen silent with it.
	var silentSince time.Time
	if hb, _, ok := o.Heartbeats.Latest(node); ok {
		silentSince = hb.Received
	}
	judge := func(other string, due time.Time, heard bool, received time.Time) {
		if runsAgent != nil && !runsAgent(other) {
			return
		}
		switch seen, ok := o.Renewals.RenewedAt(other); {
		case !now.After(due) && heard && received.Before(silentSince):
			cs.Judged++ // not late yet, but not heard since the node's silence began
			cs.Pending = append(cs.Pending, other)
		case !now.After(due) && heard:
			cs.Judged++ // heard lately: not silent
		case !now.After(due):
			cs.Judged++ // not heard yet, and may still be
			cs.Pending = append(cs.Pending, other)
		case ok && seen.After(due):
			cs.Judged++
			cs.Silent = append(cs.Silent, other)
		default:
			last, _ := o.Renewals.Last(other)
			if now.Before(due.Add(lease.RenewInterval(last) + classify.RenewalMarginFor(o.Renewals.Lateness(other, now)))) {
				cs.Judged++ // its kubelet's next renewal may still come
				cs.Pending = append(cs.Pending, other)
			}
		}
		if !heard {
			unheard[other] = true
		}
	}
	late := classify.Config{}
	heard := map[string]bool{}
	o.Heartbeats.EachReceived(func(other string, received time.Time, interval time.Duration) {
		if other == node || received.IsZero() {
			return
		}
		heard[other] = true
		judge(other, received.Add(late.LateAfter(classify.JudgedInterval(other, interval, o.IntervalFor))), true, received)
	})
	seeing, _ := o.seeing()
	listening := laterOf(o.Since, seeing)
	for _, other := range marked {
		if other == node || heard[other] {
			continue
		}
		every := classify.JudgedInterval(other, 0, o.IntervalFor)
		if every <= 0 {
			every = classify.DefaultInterval
		}
		heard[other] = true // marked twice: judged once
		judge(other, listening.Add(classify.DefaultMissedHeartbeats*every), false, time.Time{})
	}
	slices.Sort(cs.Pending)
	slices.Sort(cs.Silent)
	for _, n := range cs.Silent {
		if unheard[n] {
			cs.Unheard = append(cs.Unheard, n)
		}
	}
	return cs
}

// SelfFenceWithin is what the node's agent said in its latest heartbeat of fencing itself: how
// long after the node was last reached it has done so at the latest (0: it does not fence
// itself), and its heartbeat interval; heard is false when the controller has heard no
// heartbeat of it since it began to listen (without agents, never).
func (o Observer) SelfFenceWithin(node string) (within, interval time.Duration, heard bool) {
	if o.Heartbeats == nil {
		return 0, 0, false
	}
	hb, _, ok := o.Heartbeats.Latest(node)
	if !ok {
		return 0, 0, false
	}
	interval = classify.JudgedInterval(node, hb.Interval, o.IntervalFor)
	if interval <= 0 {
		interval = classify.DefaultInterval
	}
	return hb.SelfFenceWithin, interval, true
}

// AgentLastAlive is the latest moment the node's agent is known to have run: its latest
// heartbeat's arrival, or a peer's report of acknowledging its probe (LastReached), whichever is
// later; zero when neither is known (without agents, always).
func (o Observer) AgentLastAlive(node string) time.Time {
	if o.Heartbeats == nil {
		return time.Time{}
	}
	var last time.Time
	if hb, _, ok := o.Heartbeats.Latest(node); ok {
		last = hb.Received
	}
	if r := o.Heartbeats.LastReached(node); r.After(last) {
		last = r
	}
	return last
}

// signalsOf gives a node's classifier inputs from the agents: its own heartbeat and its peers'
// reports about it (nil without agents).
type signalsOf func(node string) (classify.Agent, []classify.PeerReport)

// lease is the node's Lease, nil when it has none.
func (o Observer) lease(ctx context.Context, node string) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := o.Reader.Get(ctx, client.ObjectKey{Namespace: lease.Namespace, Name: node}, l)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading lease of node %s: %w", node, err)
	}
	return l, nil
}

// observeWith judges the node on its Lease (nil: none) and its agent signals.
func (o Observer) observeWith(node *corev1.Node, l *coordinationv1.Lease, leaseTimeout time.Duration, now time.Time, sig signalsOf) detectors.Observation {
	seeing, cause := o.seeing()
	var renewalSeen time.Time
	changed, gone := false, false
	if l == nil || l.Spec.RenewTime == nil {
		// Gone since a renewal was seen: judged from that renewal, not from the Ready
		// condition's heartbeat, which a kubelet that renews its Lease posts only every few
		// minutes (a healthy node would read Dead the moment its Lease was deleted).
		if last, ok := o.Renewals.Last(node.Name); ok {
			l, gone = last, true
		}
	}
	if l != nil && l.Spec.RenewTime != nil {
		renewalSeen, changed = o.Renewals.SeenLease(node.Name, l, now, seeing)
	}
	obs := lease.ObserveSeenSince(node, l, renewalSeen, leaseTimeout, now, seeing, cause)
	if gone {
		obs.Reason = "its Lease is gone since its last renewal seen; judged from that renewal: " + obs.Reason
	}
	if changed {
		// The renewal's time on the controller's clock, as every other signal's: a node
		// whose clock lags must not have a renewal made after a moment the controller
		// recorded (a self-fence's wait began) read as one made before it. A renewal first
		// met on record keeps its own time: seen now says nothing of when it was made.
		obs.LastSeen = renewalSeen
	}
	if sig == nil {
		return obs
	}
	agent, peers := sig(node.Name)
	// An agent never heard has no interval of its own: the asked one gives its warm-up.
	agent.Interval = classify.JudgedInterval(node.Name, agent.Interval, o.IntervalFor)
	for i := range peers { // this look's own copies (sightings, Signals)
		peers[i].Interval = classify.JudgedInterval(peers[i].From, peers[i].Interval, o.IntervalFor)
	}
	return classify.Classify(classify.Signals{Node: node.Name, Lease: obs, Agent: agent, Peers: peers, LeaseRenewalSeen: renewalSeen, LeaseRenewInterval: lease.RenewInterval(l), LeaseSeeingSince: seeing,
		LeaseRenewalLateness: o.Renewals.Lateness(node.Name, now)},
		classify.Config{HeartbeatsSince: laterOf(o.Since, seeing)}, now)
}

// SawLease records the renewal a node's Lease l carries, delivered by the watch at now, as seen
// then, and how late it came (lease.Renewals.Lateness).
func (o Observer) SawLease(l *coordinationv1.Lease, now time.Time) {
	seeing, _ := o.seeing()
	o.Renewals.SeenLease(l.Name, l, now, seeing)
}

// seeing is since when the controller could see renewals, and why then (zero: always).
func (o Observer) seeing() (time.Time, string) {
	if o.Sight == nil {
		return time.Time{}, ""
	}
	return o.Sight.Since(), o.Sight.Cause()
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
