package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// A deposed leader must not act (invariant 2: one active controller). Leader election alone
// does not ensure it: a leader whose process stood still longer than its lease (a long GC
// pause, a frozen VM, SIGSTOP) wakes up in the middle of a pass, while another replica leads,
// and its pass goes on until its elector notices. Before each step that changes the world (a
// fence step, a release step, a power-on, an unfence), the controller reads its leader-election
// Lease from the API server and acts only while the Lease names it and has not expired on its
// own clock. The node controller reads it before it creates a NodeFence or lets a deleted
// Node go (its pods are force-deleted then), recovery before it records its decision, and the
// deletion of a NodeFence before it lifts a storage fence. A step's start may be recorded
// before the read (a write refused once the new leader wrote). A pause after the read, within
// the step, is not covered: it narrows the window from the length of a pass to that of a step.

// ErrNotLeading is wrapped by LeaderLease.Check's refusals.
var ErrNotLeading = errors.New("this controller does not hold the leader-election Lease")

// LeaderCheck says whether this controller still leads: nil when it does.
type LeaderCheck interface {
	Check(ctx context.Context) error
}

// LeaderLease checks the leader-election Lease Key, read through Reader (the API server, not
// a cache: a cache is as stale as the pause), for holder Identity.
type LeaderLease struct {
	Reader   client.Reader
	Key      types.NamespacedName
	Identity string
	// Now is the clock (time.Now when nil): the one the elector stamped its renewals with.
	Now func() time.Time
}

// Check reads the Lease and refuses (wrapping ErrNotLeading) unless it names l.Identity and
// its last renewal is younger than its duration.
func (l *LeaderLease) Check(ctx context.Context) error {
	lease := &coordinationv1.Lease{}
	if err := l.Reader.Get(ctx, l.Key, lease); err != nil {
		return fmt.Errorf("reading the leader-election Lease %s before acting: %w", l.Key, err)
	}
	holder := ""
	if h := lease.Spec.HolderIdentity; h != nil {
		holder = *h
	}
	if holder != l.Identity {
		return fmt.Errorf("%w: Lease %s is held by %q, not by this replica (%s): another replica leads", ErrNotLeading, l.Key, holder, l.Identity)
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return fmt.Errorf("%w: Lease %s has no renewal time or duration", ErrNotLeading, l.Key)
	}
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	expired := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	if !now.Before(expired) {
		return fmt.Errorf("%w: Lease %s was last renewed at %s and expired at %s (this replica stood still, or cannot renew it): another replica may lead",
			ErrNotLeading, l.Key, lease.Spec.RenewTime.UTC().Format(time.RFC3339Nano), expired.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// retryLeading is when a step refused for want of leadership (or of a readable Lease) is tried
// again: a fixed short time, not the work queue's growing backoff, so that a replica that
// still leads once the API server answers again acts within seconds.
const retryLeading = 2 * time.Second

// leading is nil when check says this replica leads, or there is no check (no leader
// election); else why it must not act.
func leading(ctx context.Context, check LeaderCheck) error {
	if check == nil {
		return nil
	}
	return check.Check(ctx)
}

// notLeading is the result of a pass refused by leading: nothing more is done (the record is
// the leader's), the refusal is logged, and the pass is tried again after retryLeading.
func notLeading(ctx context.Context, what string, err error) (ctrl.Result, error) {
	ctrl.LoggerFrom(ctx).Error(err, "not acting: "+what)
	return ctrl.Result{RequeueAfter: retryLeading}, nil
}

// actsOnTheWorld says whether step s changes the world: a method's fence step (a power-off, an
// order to the agent, a storage fence) or a release step. A confirmation only reads back.
func actsOnTheWorld(s v1alpha1.StepName) bool {
	if releaseStep(s) {
		return true
	}
	k, ok := kindOfStep(s)
	return ok && k.fence == s
}
