package app

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/fencing"
)

// inClusterNamespaceFile names the pod's namespace, the leader-election namespace by default.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// leaderLock builds the leader-election Lease lock as controller-runtime would (a Lease named
// LeaderElectionID in --leader-election-namespace or the pod's, the identity hostname_UUID, its
// own client with the user agent "leader-election" and a timeout of half the renew deadline, 1 s
// at least), so that this replica knows its identity in it: the reconcilers read the Lease
// before each step that acts (fencing/leading.go). It records the identity and the namespace in
// o. nil without leader election.
func leaderLock(cfg *rest.Config, o *Options) (*resourcelock.LeaseLock, error) {
	if !o.LeaderElection {
		return nil, nil
	}
	if o.LeaseDuration%time.Second != 0 {
		// The Lease keeps whole seconds: 1.9s is written as 1s, and the replica would find
		// itself not leading between renewals (under 1s, never).
		return nil, fmt.Errorf("--leader-elect-lease-duration is %s: it must be a whole number of seconds", o.LeaseDuration)
	}
	ns := o.LeaderElectionNS
	if ns == "" {
		b, err := os.ReadFile(inClusterNamespaceFile)
		if err != nil {
			return nil, fmt.Errorf("no --leader-election-namespace and no pod namespace to default it to (%s): %w", inClusterNamespaceFile, err)
		}
		ns = strings.TrimSpace(string(b))
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("the leader-election identity: %w", err)
	}
	renew := o.RenewDeadline
	if renew <= 0 {
		renew = defaultRenewDeadline
	}
	c := rest.CopyConfig(cfg)
	c.Timeout = max(renew/2, time.Second)
	cs, err := kubernetes.NewForConfig(rest.AddUserAgent(c, "leader-election"))
	if err != nil {
		return nil, fmt.Errorf("the leader-election client: %w", err)
	}
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, LeaderElectionID, cs.CoreV1(), cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return nil, fmt.Errorf("creating the leader-election lock: %w", err)
	}
	o.leaderIdentity, o.leaderNamespace = id, ns
	return lock.(*resourcelock.LeaseLock), nil
}

// leaseEvents records the elector's events ("… became leader") on the Lease, as
// controller-runtime's own lock does, through the manager's recorder.
type leaseEvents struct{ rec events.EventRecorder }

func (l leaseEvents) Eventf(obj runtime.Object, typ, reason, message string, args ...any) {
	l.rec.Eventf(obj, nil, typ, reason, "LeaderElection", message, args...)
}

// leaderCheck is the reconcilers' check of leadership, nil without leader election.
func leaderCheck(reader client.Reader, o Options) fencing.LeaderCheck {
	if !o.LeaderElection {
		return nil
	}
	return &fencing.LeaderLease{Reader: reader, Key: types.NamespacedName{Namespace: o.leaderNamespace, Name: LeaderElectionID}, Identity: o.leaderIdentity}
}

// lockOrNil is lock as the manager's option: a nil *LeaseLock would be a non-nil interface.
func lockOrNil(lock *resourcelock.LeaseLock) resourcelock.Interface {
	if lock == nil {
		return nil
	}
	return lock
}

// orderCheckTTL is how long the heartbeat server trusts a leader check that passed: it is asked
// at every heartbeat of every node with an order pending (a rack of Executor fences: dozens a
// second, for the whole verify window), and one read of the Lease then serves them all.
const orderCheckTTL = 500 * time.Millisecond

// recentLeaderCheck is a leader check for the heartbeat server: one read of the Lease at a time,
// the others waiting for it, and a pass trusted for ttl from when its read began, by the
// monotonic clock and by the wall clock both. A process stopped longer than ttl finds its pass
// stale when it wakes (the monotonic clock runs while it is stopped); a VM paused or suspended,
// whose monotonic clock may not have run, by its wall clock once that is set right. A refusal is
// not kept: the next heartbeat reads again. A pass is not cut short by the Lease's own expiry:
// a leader that cannot renew stops leading at its renew deadline, which the chart sets 5 s
// before the Lease expires (10 s against 15 s); a renew deadline set within ttl of the lease
// duration leaves a pass up to ttl past the expiry.
type recentLeaderCheck struct {
	check fencing.LeaderCheck
	ttl   time.Duration
	now   func() time.Time
	one   chan struct{} // held while a check runs; guards okUntil
	// okUntil is when the last pass goes stale.
	okUntil time.Time
}

func newRecentLeaderCheck(check fencing.LeaderCheck, ttl time.Duration, now func() time.Time) *recentLeaderCheck {
	return &recentLeaderCheck{check: check, ttl: ttl, now: now, one: make(chan struct{}, 1)}
}

// Check passes when a check that passed began less than ttl ago, else checks.
func (c *recentLeaderCheck) Check(ctx context.Context) error {
	select {
	case c.one <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.one }()
	began := c.now()
	if began.Before(c.okUntil) && began.Round(0).Before(c.okUntil.Round(0)) { // monotonic, then wall
		return nil
	}
	if err := c.check.Check(ctx); err != nil {
		return err
	}
	c.okUntil = began.Add(c.ttl)
	return nil
}
