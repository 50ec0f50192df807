package lease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// renewing feeds r the renewals of node, seen every gap from start (the first one first met
// on record), count of them, with a 40 s Lease (renewed every 10 s); it returns when the last
// was seen.
func renewing(r *Renewals, node string, start time.Time, gap time.Duration, count int, seeing time.Time) time.Time {
	at := start
	for i := range count {
		at = start.Add(time.Duration(i) * gap)
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: node},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: at.Add(-time.Hour)}, LeaseDurationSeconds: ptr.To[int32](40)}}
		r.SeenLease(node, l, at, seeing)
	}
	return at
}

// The lateness of renewals, each node's own and the cluster's: what counts and what does not.
func TestRenewalLateness(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	t.Run("on time: the jitter", func(t *testing.T) {
		r := NewRenewals()
		end := renewing(r, "n1", t0, 10300*time.Millisecond, 5, time.Time{})
		if got, want := r.Lateness("n1", end), 300*time.Millisecond; got != want {
			t.Errorf("Lateness = %s, want %s", got, want)
		}
	})
	t.Run("a loaded API server: every node late, a new node judged by the cluster", func(t *testing.T) {
		r := NewRenewals()
		var end time.Time
		for _, n := range []string{"n1", "n2", "n3"} {
			end = renewing(r, n, t0, 13*time.Second, 4, time.Time{})
		}
		if got, want := r.Lateness("n4", end), 3*time.Second; got != want {
			t.Errorf("Lateness of a node with no renewal of its own = %s, want the cluster's %s", got, want)
		}
	})
	t.Run("a few nodes' outages do not move the cluster's, only their own", func(t *testing.T) {
		r := NewRenewals()
		var end time.Time
		for i := range 9 {
			end = renewing(r, string(rune('a'+i)), t0, 10400*time.Millisecond, 3, time.Time{})
		}
		// n1's renewal came 25 s late once (its path cut and healed): within the Lease's
		// duration, but a missed renewal more than a late one: counted one interval late.
		last := renewing(r, "n1", t0, 10400*time.Millisecond, 3, time.Time{})
		renewing(r, "n1", last, 35*time.Second, 2, time.Time{})
		if got, want := r.Lateness("a", end), 400*time.Millisecond; got != want {
			t.Errorf("another node's Lateness = %s, want %s", got, want)
		}
		if got, want := r.Lateness("n1", end), 10*time.Second; got != want {
			t.Errorf("n1's own Lateness = %s, want %s", got, want)
		}
	})
	t.Run("a watch that delivered the previous renewal late does not hide the kubelet's lateness", func(t *testing.T) {
		// The kubelet renews 11.5 s apart (1.5 s late, by its own stamps); the watch
		// delivered every other renewal 3 s late, at the tail of a stall, so the gaps seen
		// alternate 14.5 s and 8.5 s. Counted by the seen gaps alone, half the samples read
		// 4.5 s late and half read 0: the cluster's quantile, with samples like those of the
		// second half only (the first half's cut by blind spells), read none.
		r := NewRenewals()
		stamp, seenAt := t0, t0
		for i := range 8 {
			stamp = t0.Add(time.Duration(i) * 11500 * time.Millisecond)
			seenAt = stamp
			if i%2 == 1 {
				seenAt = stamp.Add(3 * time.Second)
			}
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "n1"},
				Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: stamp.Add(-time.Hour)}, LeaseDurationSeconds: ptr.To[int32](40)}}
			r.SeenLease("n1", l, seenAt, time.Time{})
		}
		// 7 samples: 3 seen 4.5 s late, 4 seen 8.5 s apart (0 late) but stamped 1.5 s late.
		for _, ms := range r.seen["n1"].late.ms {
			if time.Duration(ms)*time.Millisecond < 1500*time.Millisecond {
				t.Errorf("a sample of n1's own lateness read %d ms, under the 1.5 s its kubelet stamped", ms)
			}
		}
		// The cluster's, with others on time, is at least the kubelet's 1.5 s.
		if got := r.ClusterLateness(seenAt); got < 1500*time.Millisecond {
			t.Errorf("the cluster's lateness = %s, under the 1.5 s n1's kubelet renewed late", got)
		}
	})
	t.Run("what is not lateness", func(t *testing.T) {
		r := NewRenewals()
		// The first renewal met on record was made some time before: the gap to the next is
		// no measure.
		renewing(r, "first", t0, 15*time.Second, 2, time.Time{})
		// An absence longer than the Lease: it expired in between.
		renewing(r, "absent", t0, 50*time.Second, 3, time.Time{})
		// Renewals seen before the controller could see again (a blind spell until t0+30s).
		renewing(r, "blind", t0, 25*time.Second, 3, t0.Add(30*time.Second))
		for _, n := range []string{"first", "absent", "blind"} {
			if got := r.Lateness(n, t0.Add(time.Minute)); got != 0 {
				t.Errorf("Lateness(%s) = %s, want none counted", n, got)
			}
		}
		// The blind node's next renewal, its previous seen after the blind spell, counts.
		renewing(r, "blind", t0.Add(50*time.Second), 11*time.Second, 2, t0.Add(30*time.Second))
		if got, want := r.Lateness("blind", t0.Add(time.Minute)), time.Second; got != want {
			t.Errorf("Lateness(blind) after = %s, want %s", got, want)
		}
	})
	t.Run("the cluster's window moves on; a node's own stays with it", func(t *testing.T) {
		r := NewRenewals()
		end := renewing(r, "n1", t0, 14*time.Second, 3, time.Time{})
		later := end.Add(LatenessWindow + slotLength)
		if got := r.Lateness("n2", later); got != 0 {
			t.Errorf("the cluster's Lateness %s after the window = %s, want 0", LatenessWindow, got)
		}
		if got, want := r.Lateness("n1", later), 4*time.Second; got != want {
			t.Errorf("n1's own Lateness = %s, want %s", got, want)
		}
		r.Forget("n1")
		if got := r.Lateness("n1", later); got != 0 {
			t.Errorf("a forgotten node's Lateness = %s, want 0", got)
		}
	})
	var none *Renewals
	if got := none.Lateness("n1", t0); got != 0 {
		t.Errorf("nil Renewals' Lateness = %s", got)
	}
}
