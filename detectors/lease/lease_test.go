package lease

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/detectors"
)

func TestObserve(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.MicroTime { m := metav1.NewMicroTime(now.Add(-d)); return &m }
	node := func(heartbeat time.Duration) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
		if heartbeat >= 0 {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, LastHeartbeatTime: metav1.NewTime(now.Add(-heartbeat))}}
		}
		return n
	}
	// A kubelet renewing every 5 s, so that the 10 s timeout below is kept (Timeout).
	lease := func(age time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](20), RenewTime: ago(age)}}
	}
	tests := []struct {
		name  string
		node  *corev1.Node
		lease *coordinationv1.Lease
		want  detectors.Verdict
	}{
		{"fresh lease", node(time.Hour), lease(time.Second), detectors.Healthy},
		{"lease past half the timeout", node(time.Hour), lease(6 * time.Second), detectors.Suspect},
		{"lease past the timeout", node(0), lease(11 * time.Second), detectors.Dead},
		{"lease wins over a fresh heartbeat", node(0), lease(30 * time.Second), detectors.Dead},
		{"no lease, fresh heartbeat", node(time.Second), nil, detectors.Healthy},
		{"no lease, stale heartbeat", node(time.Minute), nil, detectors.Dead},
		// A kubelet that renews a Lease posts its Ready heartbeat only on a change or every few
		// minutes: while Ready is True an old one says nothing; the node lifecycle controller
		// turns it Unknown once the kubelet stops.
		{"no lease, stale heartbeat, Ready True", ready(node(5*time.Minute), corev1.ConditionTrue), nil, detectors.Suspect},
		{"no lease, stale heartbeat, Ready Unknown", ready(node(5*time.Minute), corev1.ConditionUnknown), nil, detectors.Dead},
		{"no lease, fresh heartbeat, Ready True", ready(node(time.Second), corev1.ConditionTrue), nil, detectors.Healthy},
		{"no signal at all on an old node", node(-1), nil, detectors.Dead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Observe(tt.node, tt.lease, 10*time.Second, now)
			if got.Verdict != tt.want {
				t.Errorf("verdict = %s, want %s (reason %q)", got.Verdict, tt.want, got.Reason)
			}
			if got.Reason == "" {
				t.Error("empty reason")
			}
		})
	}
}

func TestObserveDeadline(t *testing.T) {
	now := time.Now()
	renew := metav1.NewMicroTime(now.Add(-3 * time.Second))
	l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](20), RenewTime: &renew}} // renewed every 5 s
	got := Observe(&corev1.Node{}, l, 10*time.Second, now)
	if want := renew.Add(10 * time.Second); !got.Deadline.Equal(want) || !got.LeaseExpiry {
		t.Errorf("deadline = %s (Lease expiry %v), want %s, the Lease's expiry", got.Deadline, got.LeaseExpiry, want)
	}
	fresh := ObserveSince(&corev1.Node{}, l, 10*time.Second, now, now.Add(-time.Second), "APIUnreachable")
	if want := now.Add(9 * time.Second); !fresh.Deadline.Equal(want) || fresh.LeaseExpiry {
		t.Errorf("fresh period: deadline = %s (Lease expiry %v), want %s, not the Lease's expiry", fresh.Deadline, fresh.LeaseExpiry, want)
	}
	if none := Observe(&corev1.Node{}, nil, 10*time.Second, now); none.LeaseExpiry {
		t.Error("no renewal yet: the deadline counts from the node's creation, not a Lease's expiry")
	}
}

func TestRenewalsSeenOnControllerClock(t *testing.T) {
	r := NewRenewals()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	renew := t0.Add(-time.Hour) // a node clock an hour behind
	if got := r.Seen("n1", renew, t0); !got.Equal(t0) {
		t.Fatalf("first sight = %v, want %v", got, t0)
	}
	if got := r.Seen("n1", renew, t0.Add(5*time.Second)); !got.Equal(t0) {
		t.Errorf("same renewal seen again = %v, want the first sight %v", got, t0)
	}
	if got := r.Seen("n1", renew.Add(10*time.Second), t0.Add(10*time.Second)); !got.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("new renewal = %v, want %v", got, t0.Add(10*time.Second))
	}
	if got := r.Seen("n1", time.Time{}, t0); !got.IsZero() {
		t.Errorf("no renewal = %v, want zero", got)
	}
	r.Forget("n1")
	if got := r.Seen("n1", renew, t0.Add(time.Minute)); !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("after Forget = %v, want a first sight", got)
	}
	var none *Renewals
	if got := none.Seen("n1", renew, t0); !got.IsZero() {
		t.Errorf("nil Renewals = %v, want zero", got)
	}
}

func TestObserveSince(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	const timeout = 20 * time.Second
	renewed := func(ago time.Duration) *coordinationv1.Lease {
		m := metav1.NewMicroTime(now.Add(-ago))
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &m}}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
	type result struct {
		Verdict  detectors.Verdict
		Deadline time.Time
		LastSeen time.Time
	}
	tests := []struct {
		name   string
		lease  *coordinationv1.Lease
		seeing time.Time
		want   result
	}{
		{"always seeing: Observe's verdict", renewed(time.Minute), time.Time{},
			result{detectors.Dead, now.Add(-time.Minute + timeout), now.Add(-time.Minute)}},
		{"old lease, sight regained just now: fresh period", renewed(time.Minute), now.Add(-time.Second),
			result{detectors.Healthy, now.Add(-time.Second + timeout), now.Add(-time.Minute)}},
		{"old lease, sight regained past half the period: late", renewed(time.Minute), now.Add(-15 * time.Second),
			result{detectors.Suspect, now.Add(-15*time.Second + timeout), now.Add(-time.Minute)}},
		{"old lease, a whole period seen since: dead", renewed(time.Minute), now.Add(-21 * time.Second),
			result{detectors.Dead, now.Add(-time.Minute + timeout), now.Add(-time.Minute)}},
		{"renewed after sight regained: its own deadline", renewed(2 * time.Second), now.Add(-5 * time.Second),
			result{detectors.Healthy, now.Add(-2*time.Second + timeout), now.Add(-2 * time.Second)}},
		{"no lease, no heartbeat, sight regained just now", nil, now.Add(-time.Second),
			result{detectors.Healthy, now.Add(-time.Second + timeout), time.Time{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := ObserveSince(node, tt.lease, timeout, now, tt.seeing, "APIUnreachable")
			got := result{obs.Verdict, obs.Deadline, obs.LastSeen}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("observation (-want +got):\n%s\nreason %q", diff, obs.Reason)
			}
			if obs.Reason == "" {
				t.Error("empty reason")
			}
		})
	}
}

// TestTimeoutCoversTwoRenewals: a node's Lease is judged with at least two of its kubelet's
// renewal intervals, whatever the policy's leaseTimeout, so that a kubelet renewing on time
// never reads as late or expired; a kubelet tuned to renew faster keeps a short timeout.
func TestTimeoutCoversTwoRenewals(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
	// renewed is a Lease of duration secs (0: unset, the kubelet's 10 s interval) renewed ago.
	renewed := func(secs int32, ago time.Duration) *coordinationv1.Lease {
		m := metav1.NewMicroTime(now.Add(-ago))
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &m}}
		if secs > 0 {
			l.Spec.LeaseDurationSeconds = ptr.To(secs)
		}
		return l
	}
	type result struct {
		Verdict  detectors.Verdict
		Timeout  time.Duration
		Deadline time.Time
	}
	tests := []struct {
		name   string
		lease  *coordinationv1.Lease
		policy time.Duration
		seeing time.Time // zero: always
		want   result
	}{
		{"renews every 10s, leaseTimeout 5s, renewed 7s ago: judged with 20s, fresh", renewed(40, 7*time.Second), 5 * time.Second, time.Time{},
			result{detectors.Healthy, 20 * time.Second, now.Add(13 * time.Second)}},
		{"renews every 10s, leaseTimeout 5s, renewed 12s ago: a renewal late, not expired", renewed(40, 12*time.Second), 5 * time.Second, time.Time{},
			result{detectors.Suspect, 20 * time.Second, now.Add(8 * time.Second)}},
		{"renews every 10s, leaseTimeout 5s, renewed 21s ago: two renewals missed", renewed(40, 21*time.Second), 5 * time.Second, time.Time{},
			result{detectors.Dead, 20 * time.Second, now.Add(-time.Second)}},
		{"Lease without a duration: the kubelet's default 10s interval", renewed(0, 7*time.Second), 5 * time.Second, time.Time{},
			result{detectors.Healthy, 20 * time.Second, now.Add(13 * time.Second)}},
		{"tuned kubelet renewing every 2.5s keeps leaseTimeout 5s: renewed 3s ago, late", renewed(10, 3*time.Second), 5 * time.Second, time.Time{},
			result{detectors.Suspect, 5 * time.Second, now.Add(2 * time.Second)}},
		{"tuned kubelet renewing every 2.5s keeps leaseTimeout 5s: renewed 6s ago, dead", renewed(10, 6*time.Second), 5 * time.Second, time.Time{},
			result{detectors.Dead, 5 * time.Second, now.Add(-time.Second)}},
		{"a leaseTimeout longer than two renewals is kept", renewed(40, 25*time.Second), 30 * time.Second, time.Time{},
			result{detectors.Suspect, 30 * time.Second, now.Add(5 * time.Second)}},
		{"the fresh period after blindness is the raised timeout too", renewed(40, time.Minute), 5 * time.Second, now.Add(-8 * time.Second),
			result{detectors.Healthy, 20 * time.Second, now.Add(12 * time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := ObserveSince(node, tt.lease, tt.policy, now, tt.seeing, "APIUnreachable")
			got := result{obs.Verdict, obs.Timeout, obs.Deadline}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("observation (-want +got):\n%s\nreason %q", diff, obs.Reason)
			}
			if raised := tt.want.Timeout != tt.policy; raised && obs.Verdict != detectors.Healthy && !strings.Contains(obs.Reason, "raised") {
				t.Errorf("reason %q does not say the leaseTimeout was raised", obs.Reason)
			}
		})
	}
}

// ready sets n's Ready condition's status.
func ready(n *corev1.Node, status corev1.ConditionStatus) *corev1.Node {
	n.Status.Conditions[0].Status = status
	return n
}
