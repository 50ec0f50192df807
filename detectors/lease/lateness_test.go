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
		// The kubelet renews 11.5 s apart (1.5 s late, by its own stamps). The watch stalls
		// before every other renewal: the controller is blind until it delivers it, 3 s late,
		// and sees again then. The gap into the stall (14.5 s seen) spans the blind spell and
		// does not count; the gap out of it, 8.5 s seen, does: by the seen gaps alone, every
		// sample that counts read 0 late.
		r := NewRenewals()
		var seeing, seenAt time.Time
		for i := range 8 {
			stamp := t0.Add(time.Duration(i) * 11500 * time.Millisecond)
			seenAt = stamp
			if i%2 == 1 {
				seenAt = stamp.Add(3 * time.Second)
				seeing = seenAt
			}
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "n1"},
				Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: stamp.Add(-time.Hour)}, LeaseDurationSeconds: ptr.To[int32](40)}}
			r.SeenLease("n1", l, seenAt, seeing)
		}
		// 3 samples count (out of the stalls), each stamped 11.5 s apart: 1.5 s late.
		if got, want := r.ClusterLateness(seenAt), 1500*time.Millisecond; got != want {
			t.Errorf("the cluster's lateness = %s, want the %s n1's kubelet renewed late", got, want)
		}
		if got, want := r.Lateness("n1", seenAt), 1500*time.Millisecond; got != want {
			t.Errorf("n1's lateness = %s, want %s", got, want)
		}
	})
	t.Run("a kubelet's clock step is no lateness", func(t *testing.T) {
		// Renewals seen 10.2 s apart; between two of them the kubelet's clock stepped 50 s
		// forward (NTP): a stamped gap longer than the Lease is a step, not a renewal that
		// late, and the seen gap is taken.
		r := NewRenewals()
		var seenAt time.Time
		for i := range 5 {
			seenAt = t0.Add(time.Duration(i) * 10200 * time.Millisecond)
			stamp := seenAt
			if i >= 3 {
				stamp = stamp.Add(50 * time.Second)
			}
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "n1"},
				Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: stamp}, LeaseDurationSeconds: ptr.To[int32](40)}}
			r.SeenLease("n1", l, seenAt, time.Time{})
		}
		if got, want := r.Lateness("n1", seenAt), 200*time.Millisecond; got != want {
			t.Errorf("n1's lateness = %s, want %s (the clock step not counted)", got, want)
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
