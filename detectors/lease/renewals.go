package lease

import (
	"sync"
	"time"
)

// Renewals remembers, per node, the Lease renewal last seen and when the controller first saw
// it, on the controller's own clock. The renewTime in a Lease is the node's clock; the moment
// the controller saw it change is free of clock skew, which is what the classifier needs to
// order a renewal against an agent's last heartbeat. Safe for concurrent use; the zero value
// and nil are ready to use (nil remembers nothing).
type Renewals struct {
	mu   sync.Mutex
	seen map[string]renewal
}

type renewal struct {
	renewTime, seenAt time.Time
	// changed: the controller saw this renewal replace an earlier one, so seenAt is when it was
	// made, to within the watch's delay; false for a renewal it first met on record (its start).
	changed bool
}

// NewRenewals returns an empty Renewals.
func NewRenewals() *Renewals { return &Renewals{} }

// Seen records that node's Lease carries renewTime at now and returns when the controller first
// saw that renewal (now, when it is new). A controller that just started has seen every
// renewal "now": it cannot know better, and later is the safe side. Zero renewTime: zero.
func (r *Renewals) Seen(node string, renewTime, now time.Time) time.Time {
	seen, _ := r.SeenChange(node, renewTime, now)
	return seen
}

// SeenChange is Seen, and says whether the controller saw this renewal replace an earlier one
// it had on record: only then is the seen time when the renewal was made, on the controller's
// clock, to within the watch's delay. A renewal first met on record (the controller's start,
// or the node's first) was made at some time before.
func (r *Renewals) SeenChange(node string, renewTime, now time.Time) (time.Time, bool) {
	if r == nil || renewTime.IsZero() {
		return time.Time{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]renewal{}
	}
	cur, ok := r.seen[node]
	if ok && cur.renewTime.Equal(renewTime) {
		return cur.seenAt, cur.changed
	}
	r.seen[node] = renewal{renewTime: renewTime, seenAt: now, changed: ok}
	return now, ok
}

// Forget drops a deleted node.
func (r *Renewals) Forget(node string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, node)
}
