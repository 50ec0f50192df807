package fencing

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// ReadBacks wakes a fence whose VerifyFenced step waits on its node's agent (a method that leaves
// the node running: the Executor) the moment a heartbeat that decides the step arrives: one that
// reads workload containers running again after the confirmation (the method fails), or one sent
// at or after the window's end that reads none running (the window is covered). Heartbeats
// change no API object, so without it the step sees such a heartbeat only at its next requeue,
// and with every worker busy (a rack of 40 released at once, on an API server that stalls) that
// came 5 to 17 s after the heartbeat in make bench-scale at 5000 nodes. It changes when the step
// is looked at, never what the step requires: the pass judges the heartbeats itself
// (readBackCovers, workloadBack), and a wake lost (the channel full) leaves the requeue to look.
//
// Its Heard is the agent heartbeat server's OnHeartbeat; the NodeFence controller reads its
// events (SetupWithManager).
type ReadBacks struct {
	mu sync.Mutex
	// waiting is, by node, the fence waiting on the node's agent and what would decide it.
	waiting map[string]readBackWait
	events  chan event.GenericEvent
}

// readBackWait is a fence waiting on its node's agent.
type readBackWait struct {
	// fence is a minimal copy of the fence (name, node, urgency, last step), sent in the event:
	// its queue priority (a VerifyFenced pass goes first) is read from it.
	fence *v1alpha1.NodeFence
	// after is the first instant surely after the confirmation (afterConfirmation): a heartbeat
	// received after it that reads containers running disproves the method.
	after time.Time
	// until is the window's end: a heartbeat sent at or after it that reads none running covers
	// the window.
	until time.Time
}

// readBackEvents bounds the wakes waiting for the controller: more than a rack's fences.
const readBackEvents = 1024

// NewReadBacks returns an empty ReadBacks.
func NewReadBacks() *ReadBacks {
	return &ReadBacks{waiting: map[string]readBackWait{}, events: make(chan event.GenericEvent, readBackEvents)}
}

// source is the NodeFence controller's source of the wakes: each goes into the work queue at
// its fence's priority (byPriority).
func (w *ReadBacks) source() source.Source {
	return source.Channel(w.events, byPriority())
}

// wait records that nf's VerifyFenced step waits on its node's agent, with its window ending at
// until; it replaces what an earlier pass recorded for the node.
func (w *ReadBacks) wait(nf *v1alpha1.NodeFence, until time.Time) {
	if w == nil {
		return
	}
	c := &v1alpha1.NodeFence{}
	c.Name, c.Spec.NodeName, c.Spec.Urgency = nf.Name, nf.Spec.NodeName, nf.Spec.Urgency
	c.Status.Steps = []v1alpha1.Step{*lastStep(nf)}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting[nf.Spec.NodeName] = readBackWait{fence: c, after: afterConfirmation(nf), until: until}
}

// done forgets the fence named, if it waits.
func (w *ReadBacks) done(fence string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for node, wt := range w.waiting {
		if wt.fence.Name == fence {
			delete(w.waiting, node)
		}
	}
}

// Heard is called with every heartbeat the agent server accepts (its Sent already placed on the
// server's clock); it never blocks. A heartbeat that decides the waiting fence's step wakes it
// once: its pass records the wait again if it still waits.
func (w *ReadBacks) Heard(hb agentwire.Heartbeat) {
	if w == nil || hb.RunningContainers == nil {
		return // reads nothing back: decides nothing
	}
	w.mu.Lock()
	wt, ok := w.waiting[hb.Node]
	if !ok || !decides(hb, wt) {
		w.mu.Unlock()
		return
	}
	delete(w.waiting, hb.Node)
	w.mu.Unlock()
	select {
	case w.events <- event.GenericEvent{Object: wt.fence}:
	default: // full: the fence's requeue looks anyway
	}
}

// decides says whether hb decides the waiting step, by the rules the pass judges it with
// (workloadBack, readBackCovers): containers running after the confirmation, or none running in
// a heartbeat sent at or after the window's end.
func decides(hb agentwire.Heartbeat, wt readBackWait) bool {
	return runsAgain(hb, wt.after) || coversWindow(hb, wt.until)
}

// awaitReadBack records, after a pass of VerifyFenced, whether the fence waits on its node's
// agent (ReadBacks): a method that leaves the node running, watching its window or waiting for the
// read-back after it. Any other outcome forgets it.
func (r *NodeFenceReconciler) awaitReadBack(nf *v1alpha1.NodeFence, out outcome) {
	if r.ReadBacks == nil {
		return
	}
	if out.state == v1alpha1.StepStarted && out.reason == ReasonWatchingForLife && r.Heartbeats != nil && !checksLiveness(nf) && nf.Status.Liveness != nil {
		r.ReadBacks.wait(nf, nf.Status.Liveness.WatchUntil.Time)
		return
	}
	r.ReadBacks.done(nf.Name)
}
