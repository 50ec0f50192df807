package fencing

import (
	"time"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// Verify passes have workers of their own. A verify window ends only at a pass, and a pass is
// due at a set moment: a few reads (the informers' caches, the agents' heartbeats, at most the
// node's Lease), and usually no write (quiet.go). The release of another fence — a taint, its
// pods' force deletions, its attachments — is many writes, and while a rack is lost the API
// server answers them slowly: at 5000 nodes, each of ten workers releasing a fence took seconds,
// and a pass ranked first in the queue (passFirst) still waited for one of them to be done. The
// windows, 5 s by design, took 5–6–10 s (bench-scale, 5000 nodes, 40 fences at once), and every
// window so lengthened delayed that fence's own release.
//
// So the controller runs twice --fence-concurrency workers, and everything but a pass takes
// one of --fence-concurrency release slots first: as many fences advance at once as before,
// and a pass never waits for their writes. A reconcile that finds every slot taken does
// nothing and is offered again after laneRetry, with its priority (the queue then still hands
// out the most urgent first); a pass that ends its window takes a slot before the fence's
// release goes on, or is requeued the same way. One fence still never runs in two workers: the
// work queue hands a key to one worker at a time, whatever their number.

// laneRetry is how soon a reconcile that found every release slot taken is offered again.
const laneRetry = 50 * time.Millisecond

// releaseLane holds the release slots: a buffered channel, one element a slot taken. Nil: no
// bound (a reconciler called directly, as the unit tests do, not set up with a manager).
type releaseLane chan struct{}

// slot is one reconcile's hold on the release lane, given back when the reconcile ends.
type slot struct {
	lane releaseLane
	held bool
}

// take takes a release slot unless it holds one already; false when every slot is taken.
func (s *slot) take() bool {
	if s.held || s.lane == nil {
		return true
	}
	select {
	case s.lane <- struct{}{}:
		s.held = true
		return true
	default:
		return false
	}
}

// give gives the slot back, if it holds one.
func (s *slot) give() {
	if s.held {
		<-s.lane
		s.held = false
	}
}

// passing says whether the fence's next work is a pass of its open verify window: the only
// work done without a release slot.
func passing(nf *v1alpha1.NodeFence) bool {
	if !nf.DeletionTimestamp.IsZero() || nf.Spec.DryRun || len(nf.Status.Steps) == 0 {
		return false
	}
	s := lastStep(nf)
	return s.Name == v1alpha1.StepVerifyFenced && s.State == v1alpha1.StepStarted
}
