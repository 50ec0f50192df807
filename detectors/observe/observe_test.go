package observe

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/lease"
)

type sightSince time.Time

func (s sightSince) Since() time.Time { return time.Time(s) }
func (s sightSince) Cause() string    { return "APIUnreachable" }

type noHeartbeats struct{}

func (noHeartbeats) Snapshot() map[string]agentwire.Heartbeat { return nil }
func (noHeartbeats) Latest(string) (agentwire.Heartbeat, []agentwire.Sighting, bool) {
	return agentwire.Heartbeat{}, nil, false
}
func (noHeartbeats) EachReceived(func(string, time.Time, time.Duration)) {}
func (noHeartbeats) LastReached(string) time.Time                        { return time.Time{} }

// nodeWithLease is node n1, an hour old at now, and a client holding it and its Lease, last
// renewed at renew.
func nodeWithLease(t *testing.T, now, renew time.Time) (*corev1.Node, client.Reader) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	rt := metav1.NewMicroTime(renew)
	return node, fake.NewClientBuilder().WithScheme(s).WithObjects(node,
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: "n1"}, Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}).Build()
}

// wantVerdict checks o's verdict on node at now, its Lease judged against 20 s.
func wantVerdict(t *testing.T, o Observer, node *corev1.Node, now time.Time, want detectors.Verdict) {
	t.Helper()
	obs, err := o.Observe(context.Background(), node, 20*time.Second, now)
	if err != nil {
		t.Fatal(err)
	}
	if obs.Verdict != want {
		t.Errorf("verdict %s, want %s (reason %q)", obs.Verdict, want, obs.Reason)
	}
}

// seenWhenMade is a record of the node's renewal at renew, seen by the controller as it was
// made (the Lease event handler's).
func seenWhenMade(node string, renew time.Time) *lease.Renewals {
	r := lease.NewRenewals()
	r.Seen(node, renew, renew)
	return r
}

// A Lease's age is counted from when the controller saw its renewal, on the controller's own
// clock, not from the renewTime the kubelet stamped with the node's: a node whose clock lags by
// 25 s, renewing on time, is not failed; one whose clock runs a minute ahead and stopped
// renewing half a minute ago is.
func TestLeaseAgeOnTheControllersClock(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name        string
		stamped     time.Time // the renewTime, on the node's clock
		seen        time.Time // when the controller saw it
		want        detectors.Verdict
		failedSince bool
	}{
		{"the node's clock 25s behind, renewed a second ago", now.Add(-26 * time.Second), now.Add(-time.Second), detectors.Healthy, false},
		{"the node's clock a minute ahead, silent for 30s", now.Add(30 * time.Second), now.Add(-30 * time.Second), detectors.Dead, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node, c := nodeWithLease(t, now, tt.stamped)
			o := Observer{Reader: c, Heartbeats: noHeartbeats{}, Since: now.Add(-time.Hour), Renewals: lease.NewRenewals()}
			o.Renewals.Seen("n1", tt.stamped, tt.seen)
			wantVerdict(t, o, node, now, tt.want)
		})
	}
}

// TestObserveSight: a Lease a minute old is judged from the moment the controller could see
// renewals again, on the Lease alone and with agents (whose warm-up restarts then too).
func TestObserveSight(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	node, c := nodeWithLease(t, now, now.Add(-time.Minute))
	tests := []struct {
		name string
		o    Observer
		want detectors.Verdict
		// in is a part of the reason.
		in string
	}{
		{"no sight tracker", Observer{Reader: c}, detectors.Dead, "not renewed"},
		{"seeing for an hour", Observer{Reader: c, Sight: sightSince(now.Add(-time.Hour))}, detectors.Dead, "not renewed"},
		{"seeing again for 2s", Observer{Reader: c, Sight: sightSince(now.Add(-2 * time.Second))}, detectors.Healthy, "a fresh lease period until 2026-11-23T01:00:18Z"},
		{"agents, listening for an hour, no sight tracker", Observer{Reader: c, Heartbeats: noHeartbeats{}, Since: now.Add(-time.Hour), Renewals: seenWhenMade("n1", now.Add(-time.Minute))}, detectors.Dead, "no heartbeat ever"},
		{"agents, seeing again for 2s", Observer{Reader: c, Heartbeats: noHeartbeats{}, Since: now.Add(-time.Hour), Renewals: lease.NewRenewals(),
			Sight: sightSince(now.Add(-2 * time.Second))}, detectors.Healthy, "no heartbeat yet, controller listening for less than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs, err := tt.o.Observe(context.Background(), node, 20*time.Second, now)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, obs.Verdict); diff != "" {
				t.Errorf("verdict (-want +got):\n%s\nreason %q", diff, obs.Reason)
			}
			if !strings.Contains(obs.Reason, tt.in) {
				t.Errorf("reason %q does not say %q", obs.Reason, tt.in)
			}
		})
	}
}

// oneSilentNode is the heartbeats of an agent last heard 13s ago, with its kubelet's last Lease
// renewal, whose peer n2 cannot reach its node since.
type oneSilentNode time.Time

func (o oneSilentNode) Snapshot() map[string]agentwire.Heartbeat { return nil }
func (o oneSilentNode) Latest(string) (agentwire.Heartbeat, []agentwire.Sighting, bool) {
	now := time.Time(o)
	return agentwire.Heartbeat{Node: "n1", Received: now.Add(-13 * time.Second), Interval: time.Second},
		[]agentwire.Sighting{{From: "n2", Reachable: false, At: now.Add(-time.Second)}}, true
}
func (oneSilentNode) EachReceived(func(string, time.Time, time.Duration)) {}
func (oneSilentNode) LastReached(string) time.Time                        { return time.Time{} }

// TestObserveFastDeadAfterBlindness: the agent lost and no peer reaching the node make it Dead
// before its Lease expires only once the kubelet has missed a renewal the controller could have
// seen. After the controller was blind (the API server down), the renewal seen last, from before,
// is no such miss: the kubelet, which could not renew either, gets an interval from then.
func TestObserveFastDeadAfterBlindness(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	renew := now.Add(-13 * time.Second)
	node, c := nodeWithLease(t, now, renew)
	for _, tt := range []struct {
		name   string
		seeing time.Time
		want   detectors.Verdict
		in     string
	}{
		{"seeing for an hour: the renewal was missed", now.Add(-time.Hour), detectors.Dead, "the kubelet missed its Lease renewal"},
		{"seeing again for 2s after an outage", now.Add(-2 * time.Second), detectors.Suspect, "counted from 2026-11-23T00:59:58Z when the controller could see renewals again"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			renewals := lease.NewRenewals()
			renewals.Seen("n1", renew, renew) // seen as it was made, before the outage
			o := Observer{Reader: c, Heartbeats: oneSilentNode(now), Since: now.Add(-time.Hour), Renewals: renewals, Sight: sightSince(tt.seeing)}
			obs, err := o.Observe(context.Background(), node, 20*time.Second, now)
			if err != nil {
				t.Fatal(err)
			}
			if obs.Verdict != tt.want || !strings.Contains(obs.Reason, tt.in) {
				t.Errorf("got %s %q, want %s saying %q", obs.Verdict, obs.Reason, tt.want, tt.in)
			}
		})
	}
}

// received is the heartbeats' arrival times and intervals, by node.
type received map[string][2]time.Time

func (received) Snapshot() map[string]agentwire.Heartbeat { return nil }
func (received) Latest(string) (agentwire.Heartbeat, []agentwire.Sighting, bool) {
	return agentwire.Heartbeat{}, nil, false
}
func (received) LastReached(string) time.Time { return time.Time{} }
func (r received) EachReceived(fn func(string, time.Time, time.Duration)) {
	for n, v := range r {
		fn(n, v[0], v[1].Sub(time.Time{}))
	}
}

// SilentAgents names the other nodes whose agent was heard and is now late or lost (more than
// one and a half of its own intervals without a heartbeat), never the node asked about, nor a
// node never heard.
func TestSilentAgents(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	every := func(d time.Duration) time.Time { return time.Time{}.Add(d) }
	o := Observer{Heartbeats: received{
		"self":       {now.Add(-time.Minute), every(time.Second)},             // the node asked about
		"fresh":      {now.Add(-1500 * time.Millisecond), every(time.Second)}, // within 1.5 intervals
		"late":       {now.Add(-1600 * time.Millisecond), every(time.Second)}, // past 1.5, not yet lost
		"lost":       {now.Add(-4 * time.Second), every(time.Second)},         // 4 s, 3 intervals of 1 s
		"slow-fresh": {now.Add(-7 * time.Second), every(5 * time.Second)},     // within 1.5 intervals of 5 s
		"slow-late":  {now.Add(-8 * time.Second), every(5 * time.Second)},     // past them, far from lost (15 s)
		"default":    {now.Add(-2 * time.Second), time.Time{}},                // no interval stated: 1 s
		"never":      {time.Time{}, every(time.Second)},
	}}
	if diff := cmp.Diff([]string{"default", "late", "lost", "slow-late"}, o.SilentAgents("self", now)); diff != "" {
		t.Errorf("SilentAgents (-want +got):\n%s", diff)
	}
	if got := (Observer{}).SilentAgents("self", now); len(got) != 0 {
		t.Errorf("without agents: %v, want none", got)
	}
}

// snapshot is a heartbeat source over fixed heartbeats, answering as agentwire's reference
// functions do.
type snapshot map[string]agentwire.Heartbeat

func (s snapshot) Snapshot() map[string]agentwire.Heartbeat { return s }
func (s snapshot) Latest(node string) (agentwire.Heartbeat, []agentwire.Sighting, bool) {
	return agentwire.LatestOf(s, node)
}
func (s snapshot) EachReceived(fn func(string, time.Time, time.Duration)) {
	agentwire.EachReceivedOf(s, fn)
}
func (s snapshot) LastReached(node string) time.Time { return agentwire.LastReachedOf(s, node) }

// A node that reached a peer (the peer's agent acknowledged its probe, and says so in its
// heartbeat) sent a signal then, though its own heartbeats are lost and the peer's own probes
// of it fail: its agent counts that path, so the SelfFence method must see it (LastSignal), on
// one node's look and on a pass over all nodes alike.
func TestLastSignalCountsTheNodesProbesOfItsPeers(t *testing.T) {
	now := time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC)
	node, c := nodeWithLease(t, now, now.Add(-time.Minute))
	probed := now.Add(-2 * time.Second)
	o := Observer{Reader: c, Since: now.Add(-time.Hour), Heartbeats: snapshot{
		"n1": {Node: "n1", Received: now.Add(-30 * time.Second), Interval: time.Second, KubeletHealthy: true},
		"n2": {Node: "n2", Received: now, Interval: time.Second,
			Peers:    []agentwire.PeerReport{{Node: "n1", Reachable: false, At: now.Add(-time.Second)}},
			ProbedBy: []agentwire.PeerReport{{Node: "n1", Reachable: true, At: probed}}},
	}}
	last, err := o.LastSignal(context.Background(), "n1", now)
	if err != nil || !last.Equal(probed) {
		t.Errorf("LastSignal = %s, %v; want %s, when n2 acknowledged n1's probe", last, err, probed)
	}
	all, err := o.ObserveAll(context.Background(), []corev1.Node{*node}, 20*time.Second, now)
	if err != nil || len(all) != 1 || !all[0].LastSeen.Equal(probed) || all[0].Verdict != detectors.Partitioned {
		t.Errorf("ObserveAll = %+v, %v; want n1 Partitioned, last seen %s", all, err, probed)
	}
	// n2's latest heartbeat no longer lists the probe (past its window), and n2's report is long
	// stale: the acknowledgement the source remembers still counts.
	o.Heartbeats = remembered{snapshot{"n2": {Node: "n2", Received: now.Add(-50 * time.Second), Interval: 15 * time.Second}}, probed}
	if last, err := o.LastSignal(context.Background(), "n1", now); err != nil || !last.Equal(probed) {
		t.Errorf("LastSignal = %s, %v; want %s, the acknowledgement remembered", last, err, probed)
	}
}

// AgentLastAlive is the later of the agent's latest heartbeat and a peer's acknowledgement of its
// probe (the agent ran then), and never a sign of the node alone: the node's Lease renewal and a
// peer reaching the node (its kubelet's port may answer with the agent gone) do not count.
func TestAgentLastAlive(t *testing.T) {
	now := time.Date(2026, 11, 29, 16, 0, 0, 0, time.UTC)
	_, c := nodeWithLease(t, now, now.Add(-time.Second)) // the kubelet renewed a second ago
	probed := now.Add(-20 * time.Second)
	o := Observer{Reader: c, Since: now.Add(-time.Hour), Heartbeats: snapshot{
		"n1": {Node: "n1", Received: now.Add(-30 * time.Second), Interval: time.Second, KubeletHealthy: true},
		"n2": {Node: "n2", Received: now, Interval: time.Second,
			Peers:    []agentwire.PeerReport{{Node: "n1", Reachable: true, At: now.Add(-time.Second)}},
			ProbedBy: []agentwire.PeerReport{{Node: "n1", Reachable: true, At: probed}}},
	}}
	if got := o.AgentLastAlive("n1"); !got.Equal(probed) {
		t.Errorf("AgentLastAlive = %s, want %s (n2 acknowledged n1's probe then)", got, probed)
	}
	o.Heartbeats = snapshot{"n1": {Node: "n1", Received: now.Add(-30 * time.Second), Interval: time.Second}}
	if got := o.AgentLastAlive("n1"); !got.Equal(now.Add(-30 * time.Second)) {
		t.Errorf("AgentLastAlive = %s, want the latest heartbeat's arrival %s", got, now.Add(-30*time.Second))
	}
	if got := o.AgentLastAlive("n3"); !got.IsZero() {
		t.Errorf("AgentLastAlive of a node never heard = %s, want zero", got)
	}
	if got := (Observer{Reader: c}).AgentLastAlive("n1"); !got.IsZero() {
		t.Errorf("AgentLastAlive without agents = %s, want zero", got)
	}
}

// remembered is a heartbeat source that remembers an acknowledgement of n1's probe at its time.
type remembered struct {
	snapshot
	at time.Time
}

func (r remembered) LastReached(node string) time.Time {
	if node == "n1" {
		return r.at
	}
	return time.Time{}
}

// An agent not heard yet since the controller began to listen (a restart, a new leader) may
// just not have reported: its warm-up is three of the intervals the controller asks of it (the
// policy's detection.heartbeatInterval), not three of the default second. With 60 s heartbeats,
// a node whose Lease expired is Suspect, not Dead, 21 s after the controller began to listen.
func TestWarmUpFollowsThePolicysInterval(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	node, c := nodeWithLease(t, now, now.Add(-time.Minute))
	for _, tt := range []struct {
		name     string
		interval func(string) time.Duration
		want     detectors.Verdict
	}{
		{"the policy asks 60s heartbeats", func(string) time.Duration { return time.Minute }, detectors.Suspect},
		{"the default interval", nil, detectors.Dead},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := Observer{Reader: c, Heartbeats: noHeartbeats{}, Since: now.Add(-21 * time.Second), Renewals: seenWhenMade("n1", now.Add(-time.Minute)), IntervalFor: tt.interval}
			wantVerdict(t, o, node, now, tt.want)
		})
	}
}

// The node's last signal is its renewal's own time, even for a controller that first sees the
// renewal now (a restart, a new leader): a self-fence whose wait began after that renewal is
// not taken for disproved by the controller's own first look.
func TestLastSignalIsTheRenewalsOwnTime(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	renew := now.Add(-30 * time.Second)
	node, c := nodeWithLease(t, now, renew)
	o := Observer{Reader: c, Heartbeats: noHeartbeats{}, Since: now, Renewals: lease.NewRenewals()}
	last, err := o.LastSignal(context.Background(), node.Name, now)
	if err != nil {
		t.Fatal(err)
	}
	if !last.Equal(renew) {
		t.Errorf("last signal %s, want the renewal's own %s (first seen now)", last, renew)
	}
}

// A renewal the controller saw replace an earlier one counts as a signal at the moment it was
// seen, on the controller's clock: a node whose clock lags 20 s and that renewed 5 s ago, after
// a self-fence's wait began 10 s ago, is not taken for silent since.
func TestLastSignalOfALaggingClock(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	stamped := now.Add(-25 * time.Second) // made 5 s ago, stamped 20 s behind
	node, c := nodeWithLease(t, now, stamped)
	o := Observer{Reader: c, Heartbeats: noHeartbeats{}, Since: now.Add(-time.Hour), Renewals: seenWhenMade("n1", now.Add(-50*time.Second))}
	o.Renewals.Seen("n1", stamped, now.Add(-5*time.Second)) // the watch delivered it then
	last, err := o.LastSignal(context.Background(), node.Name, now)
	if err != nil {
		t.Fatal(err)
	}
	if started := now.Add(-10 * time.Second); !last.After(started) {
		t.Errorf("last signal %s, want after the wait's start %s: the renewal was seen at %s", last, started, now.Add(-5*time.Second))
	}
}

// A node whose Lease is deleted (kubectl delete lease) is judged from the last renewal the
// controller saw, with that Lease's duration, not from its Ready condition's heartbeat (minutes
// old on a kubelet that renews a Lease, though Ready is True): Healthy until that renewal
// expires, Dead after, as if the Lease were still there unrenewed. A Lease made again is judged
// as any.
func TestDeletedLeaseJudgedFromItsLastRenewal(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name     string
		duration int32         // the Lease's leaseDurationSeconds: four renewal intervals
		policy   time.Duration // leaseTimeout
	}{
		{"a default kubelet", 40, 20 * time.Second},
		{"a kubelet renewing every second", 4, 5 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node, c := nodeWithLease(t, now, now.Add(-time.Second))
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(now.Add(-5 * time.Minute))}}
			l := &coordinationv1.Lease{}
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: lease.Namespace, Name: "n1"}, l); err != nil {
				t.Fatal(err)
			}
			l.Spec.LeaseDurationSeconds = &tt.duration
			o := Observer{Reader: c, Heartbeats: noHeartbeats{}, Since: now.Add(-time.Hour), Renewals: seenWhenMade("n1", now.Add(-time.Second))}
			judge := func(at time.Time, want detectors.Verdict, says string) {
				t.Helper()
				obs, err := o.Observe(context.Background(), node, tt.policy, at)
				if err != nil {
					t.Fatal(err)
				}
				if obs.Verdict != want || !strings.Contains(obs.Reason, says) {
					t.Errorf("at +%s: verdict %s (%q), want %s saying %q", at.Sub(now), obs.Verdict, obs.Reason, want, says)
				}
			}
			if err := c.(client.Client).Update(context.Background(), l); err != nil {
				t.Fatal(err)
			}
			judge(now, detectors.Healthy, "renewed")
			if err := c.(client.Client).Delete(context.Background(), l); err != nil {
				t.Fatal(err)
			}
			timeout := lease.Timeout(l, tt.policy)
			judge(now.Add(time.Second), detectors.Healthy, "its Lease is gone")
			judge(now.Add(timeout), detectors.Dead, "its Lease is gone")
			made := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: "n1"},
				Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &tt.duration, RenewTime: ptrMicro(now.Add(timeout))}}
			if err := c.(client.Client).Create(context.Background(), made); err != nil {
				t.Fatal(err)
			}
			judge(now.Add(timeout+time.Second), detectors.Healthy, "renewed")
		})
	}
}

func ptrMicro(t time.Time) *metav1.MicroTime {
	m := metav1.NewMicroTime(t)
	return &m
}

// An agent asked for a longer interval than its latest heartbeat reports (the policy's
// detection.heartbeatInterval raised from 1s to 30s, or an agent restarted with its default
// second) adopts it on the answer and is silent for one new interval: it is judged by the
// longer one until a heartbeat reports it, and so are the peer reports it carries. Node n1,
// whose Lease expired, is not Dead 10 s into its agent's silence, nor while a peer's report
// 20 s old reaches it; an agent silent past three of the asked intervals is lost as before,
// and its reports stale. Without IntervalFor (the code before) each such n1 was Dead.
func TestAnAgentAskedForALongerIntervalIsJudgedByIt(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	silent := func(d time.Duration, kubeletHealthy bool) snapshot {
		return snapshot{"n1": {Node: "n1", Received: now.Add(-d), Interval: time.Second, KubeletHealthy: kubeletHealthy}}
	}
	peerSilent := func(d time.Duration) snapshot {
		return snapshot{"n2": {Node: "n2", Received: now.Add(-d), Interval: time.Second,
			Peers: []agentwire.PeerReport{{Node: "n1", Reachable: true, At: now.Add(-d)}}}}
	}
	for _, tt := range []struct {
		name  string
		asked string // the node whose policy asks 30s; the other's asks 1s
		beats snapshot
		want  detectors.Verdict
	}{
		{"agent silent 10s after a 1s heartbeat, kubelet healthy", "n1", silent(10*time.Second, true), detectors.Partitioned},
		{"agent silent 10s after a 1s heartbeat, kubelet down", "n1", silent(10*time.Second, false), detectors.KubeletDown},
		{"agent silent 60s: late, not lost", "n1", silent(time.Minute, true), detectors.Suspect},
		{"agent silent past 3 asked intervals: lost", "n1", silent(95*time.Second, true), detectors.Dead},
		{"a peer's report 20s old, the peer asked 30s", "n2", peerSilent(20 * time.Second), detectors.Partitioned},
		{"a peer's report past 3 of its asked intervals: stale", "n2", peerSilent(95 * time.Second), detectors.Dead},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node, c := nodeWithLease(t, now, now.Add(-time.Minute))
			asked := func(n string) time.Duration {
				if n == tt.asked {
					return 30 * time.Second
				}
				return time.Second
			}
			o := Observer{Reader: c, Heartbeats: tt.beats, Since: now.Add(-time.Hour), IntervalFor: asked}
			wantVerdict(t, o, node, now, tt.want)
			all, err := o.ObserveAll(context.Background(), []corev1.Node{*node}, 20*time.Second, now)
			if err != nil || len(all) != 1 || all[0].Verdict != tt.want {
				t.Errorf("ObserveAll = %+v, %v; want %s", all, err, tt.want)
			}
		})
	}
}
