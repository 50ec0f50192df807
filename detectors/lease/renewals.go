package lease

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Renewals remembers, per node, the Lease renewal last seen and when the controller first saw
// it, on the controller's own clock. The renewTime in a Lease is the node's clock; the moment
// the controller saw it change is free of clock skew, which is what the classifier needs to
// order a renewal against an agent's last heartbeat. Safe for concurrent use; the zero value
// and nil are ready to use (nil remembers nothing).
type Renewals struct {
	mu      sync.Mutex
	seen    map[string]renewal
	cluster clusterLateness
}

type renewal struct {
	renewTime, seenAt time.Time
	// changed: the controller saw this renewal replace an earlier one, so seenAt is when it was
	// made, to within the watch's delay; false for a renewal it first met on record (its start).
	changed bool
	// duration is the Lease's leaseDurationSeconds when last seen (SeenLease), if hasDuration;
	// kept by value, so that recording it on every look allocates nothing.
	duration    int32
	hasDuration bool
	// late is the node's own renewals' lateness (lateness.go), kept across renewals.
	late ownLateness
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
	rec, _, _ := r.see(node, renewTime, now)
	return rec.seenAt, rec.changed
}

// see records renewTime as seen at now, under r.mu; it returns node's record, the one it
// replaced, and whether it replaced one (a new renewal replacing an earlier one on record).
func (r *Renewals) see(node string, renewTime, now time.Time) (rec, prev renewal, replaced bool) {
	if r.seen == nil {
		r.seen = map[string]renewal{}
	}
	cur, ok := r.seen[node]
	if ok && cur.renewTime.Equal(renewTime) {
		return cur, cur, false
	}
	rec = renewal{renewTime: renewTime, seenAt: now, changed: ok, duration: cur.duration, hasDuration: cur.hasDuration, late: cur.late}
	r.seen[node] = rec
	return rec, cur, ok
}

// SeenLease is SeenChange for node's Lease l (which carries a renewTime), remembering its
// leaseDurationSeconds as well, for Last; and, for a renewal that replaces one seen replacing
// another since seeing (since when the controller could see renewals; zero: always), how late
// it came (Lateness).
func (r *Renewals) SeenLease(node string, l *coordinationv1.Lease, now, seeing time.Time) (time.Time, bool) {
	if r == nil || l.Spec.RenewTime == nil || l.Spec.RenewTime.IsZero() {
		return time.Time{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, prev, replaced := r.see(node, l.Spec.RenewTime.Time, now)
	rec.duration, rec.hasDuration = 0, l.Spec.LeaseDurationSeconds != nil
	if rec.hasDuration {
		rec.duration = *l.Spec.LeaseDurationSeconds
	}
	if replaced {
		interval := RenewInterval(l) // a quarter of the Lease's duration
		r.noteLateness(&rec, prev, now, seeing, interval, 4*interval)
	}
	r.seen[node] = rec
	return rec.seenAt, rec.changed
}

// Last is node's Lease as the controller last saw it renewed (its renewTime and duration), to
// judge a node whose Lease is gone since: deleted (kubectl delete lease, a troubleshooting
// step) or emptied of its renewTime. Such a node is as old as that renewal, no older: a kubelet
// that runs makes its Lease again within one renewal interval, and one that stopped is judged
// Dead when that renewal expires, as if nobody had touched its Lease. Kubernetes' node
// lifecycle controller keeps the last renewal it saw the same way. false when none was seen.
func (r *Renewals) Last(node string) (*coordinationv1.Lease, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.seen[node]
	if !ok {
		return nil, false
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: node}}
	l.Spec.RenewTime = &metav1.MicroTime{Time: rec.renewTime}
	if rec.hasDuration {
		l.Spec.LeaseDurationSeconds = ptr.To(rec.duration)
	}
	return l, true
}

// RenewedAt is when the controller first saw node's latest renewal replace an earlier one it
// had on record, on its own clock: when the renewal was made, to within the watch's delay.
// false when it saw none replace another (a renewal first met on record was made at some time
// before: it says nothing of when).
func (r *Renewals) RenewedAt(node string) (time.Time, bool) {
	if r == nil {
		return time.Time{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.seen[node]
	return rec.seenAt, ok && rec.changed
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
