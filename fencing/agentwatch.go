package fencing

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"palisade.dev/palisade/detectors/classify"
	"palisade.dev/palisade/detectors/observe"
)

// agentLossTick is how often agentLossWatch looks at the heartbeats: a quarter of the default
// heartbeat interval, so that a lost agent is looked at within 250 ms of its timeout.
const agentLossTick = 250 * time.Millisecond

// agentLossWatch wakes the node controller the moment a node's agent heartbeats time out.
// Heartbeats change no API object, so nothing else would: a node with a fresh Lease is
// otherwise looked at again only when its Lease is due. Every tick it reads each node's last
// heartbeat time in place (O(nodes), without copying a heartbeat) and sends only the nodes
// whose agent has just been lost; from then on the classifier's Deadline keeps such a node
// looked at every interval until it is settled.
type agentLossWatch struct {
	heartbeats observe.Heartbeats
	// intervalFor, when set, is the interval the controller asks of each node's agent: an agent
	// is judged by the longer of it and its heartbeat's (classify.JudgedInterval), as the
	// classifier judges it, so that one asked for a longer interval is not sent as lost three of
	// its old intervals into the silence it was asked for.
	intervalFor func(node string) time.Duration
	events      chan event.GenericEvent
	// firstHeard gets the nodes whose agent the watch sees heard for the first time (since it
	// started, or after the heartbeats held none of it for knownFor): their look marks them as
	// running an agent (markAgent), which a Lease renewal would not bring before the node's next
	// due look.
	firstHeard chan event.GenericEvent
	now        func() time.Time
	// lost holds the nodes whose agent was lost at the last scan, with that scan's number.
	lost  map[string]uint64
	scans uint64
	// known holds the nodes the heartbeats hold, with the time of the last scan that found them
	// there; a node absent from them for knownFor (forgotten) is dropped, and sent again once
	// heard.
	known map[string]time.Time
}

// knownFor is how long a node stays known after the heartbeats last held it: an agent whose Node
// is gone (its look forgets it, and its next heartbeat records it again) is sent once in that
// time, not at every heartbeat.
const knownFor = 10 * time.Minute

func newAgentLossWatch(h observe.Heartbeats, intervalFor func(node string) time.Duration, now func() time.Time) *agentLossWatch {
	return &agentLossWatch{heartbeats: h, intervalFor: intervalFor, events: make(chan event.GenericEvent, 1024),
		firstHeard: make(chan event.GenericEvent, 1024), now: now, lost: map[string]uint64{}, known: map[string]time.Time{}}
}

// NeedLeaderElection: only the leader fences, and only the leader hears heartbeats.
func (w *agentLossWatch) NeedLeaderElection() bool { return true }

// Start scans until ctx is done.
func (w *agentLossWatch) Start(ctx context.Context) error {
	t := time.NewTicker(agentLossTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.scan(ctx)
		}
	}
}

// scan sends the nodes lost since the last scan, and those heard for the first time. A node
// lost, heard again (or forgotten) and lost again is sent again; one the heartbeats held none of
// for knownFor is sent as first heard again once heard.
func (w *agentLossWatch) scan(ctx context.Context) {
	now := w.now()
	w.scans++
	var fresh, heard []string
	w.heartbeats.EachReceived(func(node string, received time.Time, interval time.Duration) {
		if _, was := w.known[node]; !was {
			heard = append(heard, node)
		}
		w.known[node] = now
		if interval > 0 && now.Sub(received) <= time.Duration(classify.DefaultMissedHeartbeats)*interval {
			// Not lost by the interval it reports, so not by the judged one, never shorter: the
			// asked interval (a lookup per node, every tick) is read only for the few that may be.
			return
		}
		interval = classify.JudgedInterval(node, interval, w.intervalFor)
		if interval <= 0 {
			interval = classify.DefaultInterval
		}
		if now.Sub(received) <= time.Duration(classify.DefaultMissedHeartbeats)*interval {
			return
		}
		if _, was := w.lost[node]; !was {
			fresh = append(fresh, node)
		}
		w.lost[node] = w.scans
	})
	for node, at := range w.lost {
		if at != w.scans {
			delete(w.lost, node)
		}
	}
	for node, at := range w.known {
		if now.Sub(at) > knownFor {
			delete(w.known, node)
		}
	}
	send(ctx, w.events, fresh)
	send(ctx, w.firstHeard, heard)
}

// send sends an event of each node to ch, until ctx is done.
func send(ctx context.Context, ch chan<- event.GenericEvent, nodes []string) {
	for _, node := range nodes {
		select {
		case ch <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}}:
		case <-ctx.Done():
			return
		}
	}
}
