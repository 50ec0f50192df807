package fencing

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
)

// TestLooksAgainOncePerLeaseTimeout drives the node reconciler over ten simulated minutes of a
// kubelet renewing its Lease, as the workqueue would: a reconcile at each look the previous one
// asked for (the earliest pending one wins, as in client-go's delaying queue), and one at each
// renewal's arrival while the node has no look pending (lease_events.go). A healthy node is
// to cost about one reconcile per lease timeout (20 s), not one per renewal (10 s); then its
// kubelet dies, and the node must be fenced no sooner than the timeout after its last renewal
// and no later than lookAgain's timeout/10 after that.
func TestLooksAgainOncePerLeaseTimeout(t *testing.T) {
	const (
		timeout = DefaultLeaseTimeout
		run     = 10 * time.Minute
	)
	tests := []struct {
		name string
		// next is the renewal after the one at prev; lag is how long it takes to reach the cache.
		next func(rng *rand.Rand, prev time.Time) time.Time
		lag  func(rng *rand.Rand) time.Duration
	}{
		{"a ticker every 10s exactly, 5-60ms to the cache",
			func(_ *rand.Rand, prev time.Time) time.Time { return prev.Add(10 * time.Second) },
			func(rng *rand.Rand) time.Duration {
				return 5*time.Millisecond + time.Duration(rng.Int64N(int64(55*time.Millisecond)))
			}},
		{"the kubelet: 10s plus up to 4% jitter after its renewal's 3-30ms PUT",
			func(rng *rand.Rand, prev time.Time) time.Time {
				return prev.Add(10*time.Second + time.Duration(rng.Int64N(int64(400*time.Millisecond))) + 3*time.Millisecond + time.Duration(rng.Int64N(int64(27*time.Millisecond))))
			},
			func(rng *rand.Rand) time.Duration {
				return time.Millisecond + time.Duration(rng.Int64N(int64(20*time.Millisecond)))
			}},
		{"a ticker falling behind: every 10.5s, 20-200ms to the cache",
			func(_ *rand.Rand, prev time.Time) time.Time { return prev.Add(10500 * time.Millisecond) },
			func(rng *rand.Rand) time.Duration {
				return 20*time.Millisecond + time.Duration(rng.Int64N(int64(180*time.Millisecond)))
			}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			objs, _ := cluster(map[string]string{"n1": healthy})
			c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).
				WithObjects(append(objs, withGuard(poolPolicy(ipmiMethod), "100%"))...)).Build()
			now := t0
			r := &NodeReconciler{Client: c, Recorder: &recorder{}, Now: func() time.Time { return now },
				Observer: observe.Observer{Reader: c, Renewals: lease.NewRenewals()}}
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)

			// The renewals from t0-1s on, each with the moment it reaches the cache.
			type renewal struct{ at, arrives time.Time }
			var renewals []renewal
			for at := t0.Add(-time.Second); at.Before(t0.Add(run)); at = tt.next(rng, at) {
				renewals = append(renewals, renewal{at, at.Add(tt.lag(rng))})
			}
			stopped := renewals[len(renewals)-1].at   // the kubelet's last renewal
			seen := renewals[len(renewals)-1].arrives // when the controller saw it: the age counts from then
			arrived := 1                              // renewals[:arrived] are in the cache
			cached := renewals[0].at
			look := now // the pending look
			reconciles, fenced := 0, time.Time{}
			for fenced.IsZero() && now.Before(t0.Add(run+2*timeout)) {
				// The next event: the pending look, or a renewal's arrival, which wakes the
				// node only when it has no look pending.
				now = look
				wake := arrived < len(renewals) && !renewals[arrived].arrives.After(look)
				if wake {
					now = renewals[arrived].arrives
				}
				for arrived < len(renewals) && !renewals[arrived].arrives.After(now) {
					cached = renewals[arrived].at
					// As the Lease event handler records it, from the Lease as stored (to the microsecond).
					r.Observer.Renewals.Seen("n1", cached.Truncate(time.Microsecond), renewals[arrived].arrives)
					arrived++
				}
				setRenewal(t, c, "n1", cached)
				if wake && r.looks.has("n1") {
					continue // a plain renewal of a node with a look pending: that look stands
				}
				res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
				if err != nil {
					t.Fatal(err)
				}
				reconciles++
				if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, &v1alpha1.NodeFence{}); err == nil {
					fenced = now
					break
				}
				if res.RequeueAfter <= 0 {
					t.Fatalf("at %s: a node judged not failed asked for no look again", now.Sub(t0))
				}
				if next := now.Add(res.RequeueAfter); now.Equal(look) || next.Before(look) {
					look = next
				}
			}
			healthyReconciles := reconciles - 1 // the last one fenced
			if most := int(run/timeout) + 2; healthyReconciles > most {
				t.Errorf("%d reconciles of a healthy node in %s, want at most %d (one per lease timeout)", healthyReconciles, run, most)
			}
			if fenced.IsZero() {
				t.Fatalf("the node was not fenced %s after its last renewal", now.Sub(stopped))
			}
			after := fenced.Sub(stopped)
			if earliest, latest := timeout, timeout+timeout/10+100*time.Millisecond; after <= earliest || fenced.Sub(seen) > latest {
				t.Errorf("fenced %s after the last renewal (%s after the controller saw it), want after %s and within %s of its sight", after, fenced.Sub(seen), earliest, latest)
			}
			t.Logf("%d reconciles in %s while healthy; fenced %s after the last renewal", healthyReconciles, run, after)
		})
	}
}

// TestLookAgainWaitsOnlyForLeaseExpiry: only a Deadline that is the Lease's own expiry gets the
// wait for the renewal due then; a Deadline the agents' signals set is looked at on time.
func TestLookAgainWaitsOnlyForLeaseExpiry(t *testing.T) {
	deadline := t0.Add(5 * time.Second)
	for _, tt := range []struct {
		expiry bool
		want   time.Duration
	}{{true, 7050 * time.Millisecond}, {false, 5050 * time.Millisecond}} {
		obs := detectors.Observation{Verdict: detectors.Healthy, Deadline: deadline, LeaseExpiry: tt.expiry}
		if got := lookAgain(obs, 20*time.Second, t0); got != tt.want {
			t.Errorf("LeaseExpiry %v: look again in %s, want %s", tt.expiry, got, tt.want)
		}
	}
	if got := lookAgain(detectors.Observation{Deadline: t0.Add(-time.Second)}, 20*time.Second, t0); got != 50*time.Millisecond {
		t.Errorf("a Deadline passed: look again in %s, want 50ms", got)
	}
}

// setRenewal writes node's Lease renewed at at, as the cache would hold it.
func setRenewal(t *testing.T, c client.Client, node string, at time.Time) {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: lease.Namespace, Name: node}, l); err != nil {
		t.Fatal(err)
	}
	m := metav1.NewMicroTime(at)
	l.Spec.RenewTime = &m
	if err := c.Update(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}
