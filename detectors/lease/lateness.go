package lease

import (
	"time"
)

// How late the controller sees Lease renewals. A kubelet renews every interval (plus up to
// 4 % of jitter) once its last renewal's write returned; the controller sees the renewal when
// the watch delivers it. A renewal seen one interval after the one before is on time; the rest
// is its lateness: the jitter, the API server's answer to the kubelet's write and the watch's
// delivery. A gap is the longer of the gap seen and the gap between the kubelet's own stamps
// (noteLateness). On a quiet cluster that is the jitter and a few milliseconds; on a loaded API
// server, seconds. The classifier's Dead before the Lease's expiry waits for a missed renewal
// (classify.RenewalMargin), and that wait must follow how late renewals come now, or a node
// still renewing, late, reads Dead.
//
// Two views are kept: each node's own last renewals (a node on a slow path), and the cluster's
// over the last LatenessWindow (a loaded API server slows every node). A sample counts at most
// one interval (later, a renewal was missed rather than late). A sample counts only
// between two renewals the controller saw replace one another while it could see (a renewal
// first met on record, or one seen before a blind spell, was made at some time before), and
// no farther apart than the Lease's duration (the Lease expired in between: an absence, which
// the Lease's expiry judges, not lateness). A sample's gap is the longer of the two renewals'
// gap as seen and as the kubelet stamped them (noteLateness).

const (
	// LatenessWindow is how far back the cluster's renewal lateness is counted.
	LatenessWindow = 2 * time.Minute
	// LatenessQuantile is the share of the window's renewals the cluster's lateness covers: a
	// loaded API server delays most renewals, while a few nodes' outages (a partition that
	// healed) must not disable the fast Dead for every node.
	LatenessQuantile = 0.9
	// ownSamples is how many of a node's own last renewals its own lateness is the most of.
	ownSamples = 4
	// latenessSlots cut the window; the oldest slot is dropped as time moves on.
	latenessSlots = 8
)

// latenessEdges are the upper edges of the histogram's buckets; the last bucket holds the rest.
var latenessEdges = [...]time.Duration{
	100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond,
	500 * time.Millisecond, 750 * time.Millisecond, time.Second, 1500 * time.Millisecond,
	2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second, 7500 * time.Millisecond,
	10 * time.Second, 15 * time.Second, 20 * time.Second, 30 * time.Second,
}

// latenessSlot counts the samples of one slot of the window.
type latenessSlot struct {
	start   time.Time
	buckets [len(latenessEdges) + 1]int32
	most    time.Duration
}

// clusterLateness is the cluster's renewal lateness over the window, in slots.
type clusterLateness struct {
	slots [latenessSlots]latenessSlot
	// cached is the quantile computed at cachedAt, until a sample is added: every look at a
	// node asks for it, and a tenth of a second changes little.
	cached   time.Duration
	cachedAt time.Time
}

// latenessCacheFor is how long a computed quantile is used again.
const latenessCacheFor = 100 * time.Millisecond

// slotLength is how much of the window one slot covers.
const slotLength = LatenessWindow / latenessSlots

func (c *clusterLateness) add(late time.Duration, now time.Time) {
	start := now.Truncate(slotLength)
	s := &c.slots[int(start.UnixNano()/int64(slotLength))%latenessSlots]
	if !s.start.Equal(start) {
		*s = latenessSlot{start: start}
	}
	i := 0
	for i < len(latenessEdges) && late > latenessEdges[i] {
		i++
	}
	s.buckets[i]++
	s.most = max(s.most, late)
	c.cachedAt = time.Time{}
}

// quantile is a bound of the lateness LatenessQuantile of the window's samples stay within: the
// upper edge of the bucket that reaches the quantile (up to a third above it, the safe side: a
// longer wait), or the window's latest sample when less. Zero without samples.
func (c *clusterLateness) quantile(now time.Time) time.Duration {
	if !c.cachedAt.IsZero() && !now.Before(c.cachedAt) && now.Sub(c.cachedAt) < latenessCacheFor {
		return c.cached
	}
	c.cached, c.cachedAt = c.compute(now), now
	return c.cached
}

func (c *clusterLateness) compute(now time.Time) time.Duration {
	var sum [len(latenessEdges) + 1]int32
	var n int32
	var most time.Duration
	for i := range c.slots {
		s := &c.slots[i]
		if s.start.IsZero() || now.Sub(s.start) >= LatenessWindow {
			continue
		}
		for b, k := range s.buckets {
			sum[b] += k
			n += k
		}
		most = max(most, s.most)
	}
	if n == 0 {
		return 0
	}
	want := int32(float64(n)*LatenessQuantile + 0.999999)
	var acc int32
	for b, k := range sum {
		acc += k
		if acc >= want {
			if b < len(latenessEdges) {
				return min(latenessEdges[b], most)
			}
			break
		}
	}
	return most
}

// ownLateness is a node's lateness over its last ownSamples renewals, in milliseconds.
type ownLateness struct {
	ms [ownSamples]int32
	at uint8
}

func (o *ownLateness) add(late time.Duration) {
	o.ms[o.at%ownSamples] = int32(min(late, time.Hour).Milliseconds())
	o.at++
}

func (o *ownLateness) most() time.Duration {
	var m int32
	for _, v := range o.ms {
		m = max(m, v)
	}
	return time.Duration(m) * time.Millisecond
}

// noteLateness records the lateness of a renewal seen at now that replaced prev, when it counts
// (see above): the Lease renews every interval and lasts duration.
func (r *Renewals) noteLateness(rec *renewal, prev renewal, now, seeing time.Time, interval, duration time.Duration) {
	if !prev.changed || prev.seenAt.Before(seeing) {
		return
	}
	gap := now.Sub(prev.seenAt)
	if gap > duration {
		return
	}
	// Seen gaps shrink when the watch's delay does: prev delivered late, at the tail of a
	// stall, rec on time. Such stalls are when the controller goes blind, and a sample across
	// the blind spell does not count, so the samples that do lean to short gaps (the likeliest
	// cause of a cluster lateness of 0.1 s in a make bench-scale run at 5000 nodes whose
	// kubelets renewed late, the controller blind 57 times). The kubelet's own stamps are
	// apart by its interval and its own lateness (jitter, the write's answer) whatever the
	// watch does: the longer of the two gaps is taken, the safe side (a longer wait before the
	// fast Dead). A stamped gap longer than the Lease is the kubelet's clock stepping (or a
	// new holder's clock), not lateness: the seen gap is kept then.
	if stamped := rec.renewTime.Sub(prev.renewTime); stamped > gap && stamped <= duration {
		gap = stamped
	}
	// A renewal more than an interval late is a missed one (a failed write, a path cut a
	// while), not how late renewals come: counted as one interval late, so that a node that
	// flapped keeps a fast Dead (at most three intervals after its last renewal, before the
	// Lease expires) rather than none until its next renewals.
	late := min(max(gap-interval, 0), interval)
	rec.late.add(late)
	r.cluster.add(late, now)
}

// Lateness is how late the controller has seen renewals lately, for node: the most of node's
// own last renewals' lateness and the cluster's (LatenessQuantile over LatenessWindow). Zero
// before any renewal counted.
func (r *Renewals) Lateness(node string, now time.Time) time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.seen[node]
	return max(rec.late.most(), r.cluster.quantile(now))
}

// ClusterLateness is the cluster's part of Lateness: how late LatenessQuantile of the renewals
// seen over LatenessWindow came. Zero before any renewal counted.
func (r *Renewals) ClusterLateness(now time.Time) time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cluster.quantile(now)
}
