package classify

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/lease"
)

const leaseTimeout = 20 * time.Second

var now = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// leaseAged is the real lease detector's observation of a Lease last renewed age ago.
func leaseAged(age time.Duration) detectors.Observation {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
	renew := metav1.NewMicroTime(now.Add(-age))
	return lease.Observe(node, &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}, leaseTimeout, now)
}

func agentAged(age time.Duration, kubeletHealthy bool) Agent {
	return Agent{LastSeen: now.Add(-age), Interval: time.Second, KubeletHealthy: kubeletHealthy}
}

func peer(from string, reachable bool, age time.Duration) PeerReport {
	return PeerReport{From: from, Reachable: reachable, At: now.Add(-age)}
}

// inbound is peer from's acknowledgement of the node's probe of it, age ago.
func inbound(from string, age time.Duration) PeerReport {
	return PeerReport{From: from, Reachable: true, At: now.Add(-age), Inbound: true}
}

// slow is r made by a peer that heartbeats every interval.
func slow(r PeerReport, interval time.Duration) PeerReport {
	r.Interval = interval
	return r
}

var (
	freshLease = leaseAged(time.Second)
	lateLease  = leaseAged(15 * time.Second)
	staleLease = leaseAged(45 * time.Second)
	noAgent    = Agent{}
	lostAgent  = agentAged(10*time.Second, true)
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		lease  detectors.Observation
		agent  Agent
		peers  []PeerReport
		cfg    Config
		want   detectors.Verdict
		reason []string // substrings the reason must contain
	}{
		{"fresh lease and agent", freshLease, agentAged(0, true), nil, Config{}, detectors.Healthy, []string{"Lease fresh", "kubelet healthy"}},
		// An agent silent with no Lease renewal seen since is late, not failed: the storm guard
		// counts it (a storm's nodes fall Dead one renewal apart).
		{"fresh lease, agent lost and no renewal seen since: late, not failed", freshLease, lostAgent, nil, Config{}, detectors.Suspect, []string{"no heartbeat for 10s", "its agent is silent and no Lease renewal was seen since"}},
		{"late lease", lateLease, agentAged(0, true), nil, Config{}, detectors.Suspect, []string{"Lease late", "last renewed 15s ago"}},
		{"stale lease, agent fresh, kubelet down", staleLease, agentAged(500*time.Millisecond, false), nil, Config{}, detectors.KubeletDown, []string{"kubelet down", "kubelet unhealthy", "not renewed for 45s"}},
		{"API says NotReady, agent alive: partitioned, not dead", staleLease, agentAged(time.Second, true), nil, Config{}, detectors.Partitioned, []string{"cut off from the API server", "last heartbeat 1s ago"}},
		{"stale lease, agent late", staleLease, agentAged(2*time.Second, true), nil, Config{}, detectors.Suspect, []string{"agent heartbeat late", "lost after 3s"}},
		{"API and controller cut off, peers see it: partitioned, not dead", staleLease, lostAgent, []PeerReport{peer("n2", true, time.Second), peer("n3", false, time.Second)}, Config{}, detectors.Partitioned, []string{"peers reach the node", "reached by [n2]", "not reached by [n3]"}},
		{"no path reaches it", staleLease, lostAgent, []PeerReport{peer("n2", false, time.Second), peer("n3", false, 2*time.Second)}, Config{}, detectors.Dead, []string{"dead", "not reached by [n2 n3]"}},
		{"no peer reports at all", staleLease, lostAgent, nil, Config{}, detectors.Dead, []string{"peers: no fresh report"}},
		{"stale peer report is ignored", staleLease, lostAgent, []PeerReport{peer("n2", true, 30*time.Second)}, Config{}, detectors.Dead, []string{"no fresh report, 1 stale ignored"}},
		{"peer staleness is configurable", staleLease, lostAgent, []PeerReport{peer("n2", true, 30*time.Second)}, Config{PeerStaleness: time.Minute}, detectors.Partitioned, []string{"reached by [n2]"}},
		{"a peer's latest report counts", staleLease, lostAgent, []PeerReport{peer("n2", true, 3*time.Second), peer("n2", false, time.Second)}, Config{}, detectors.Dead, []string{"not reached by [n2]"}},
		// The node's own probe of n2, acknowledged by n2's agent, is a path of its own: n2's
		// later failure to probe the node (a firewall passing one direction) does not hide it.
		{"the node reached a peer that cannot reach it", staleLease, lostAgent, []PeerReport{inbound("n2", 2*time.Second), peer("n2", false, time.Second)}, Config{}, detectors.Partitioned, []string{"peers reach the node or it reaches them", "not reached by [n2], reaches [n2]"}},
		{"the node's probe of a peer goes stale", staleLease, lostAgent, []PeerReport{inbound("n2", 30*time.Second), peer("n2", false, time.Second)}, Config{}, detectors.Dead, []string{"1 stale ignored"}},
		// A peer that heartbeats every 15 s reports that far apart: its report of 30 s ago is
		// its latest but one, not stale (3 of its intervals, 45 s); at 50 s it is.
		{"a slow peer's report lasts three of its intervals", staleLease, lostAgent, []PeerReport{slow(peer("n2", true, 30*time.Second), 15*time.Second)}, Config{}, detectors.Partitioned, []string{"reached by [n2]"}},
		{"a slow peer's report goes stale after three of its intervals", staleLease, lostAgent, []PeerReport{slow(peer("n2", true, 50*time.Second), 15*time.Second)}, Config{}, detectors.Dead, []string{"1 stale ignored"}},
		{"the node probing every 15 s: its acknowledged probe lasts three of its intervals", staleLease, Agent{LastSeen: now.Add(-50 * time.Second), Interval: 15 * time.Second, KubeletHealthy: true}, []PeerReport{inbound("n2", 30*time.Second)}, Config{}, detectors.Partitioned, []string{"reaches [n2]"}},
		{"fast peers keep the configured staleness", staleLease, lostAgent, []PeerReport{slow(peer("n2", true, 11*time.Second), 2*time.Second)}, Config{}, detectors.Dead, []string{"1 stale ignored"}},
		{"never an agent, fresh lease", freshLease, noAgent, nil, Config{}, detectors.Healthy, []string{"verdict from the Lease alone", "no heartbeat ever received"}},
		{"never an agent, late lease", lateLease, noAgent, nil, Config{}, detectors.Suspect, []string{"verdict from the Lease alone"}},
		{"never an agent, stale lease", staleLease, noAgent, nil, Config{}, detectors.Dead, []string{"verdict from the Lease alone"}},
		{"never an agent, stale lease, peers see it", staleLease, noAgent, []PeerReport{peer("n2", true, time.Second)}, Config{}, detectors.Partitioned, []string{"peers reach the node"}},
		{"controller just started listening", staleLease, noAgent, nil, Config{HeartbeatsSince: now.Add(-time.Second)}, detectors.Suspect, []string{"waiting for the first agent heartbeats"}},
		{"controller listening long enough", staleLease, noAgent, nil, Config{HeartbeatsSince: now.Add(-time.Minute)}, detectors.Dead, []string{"verdict from the Lease alone"}},
		{"slow agent interval respected", staleLease, Agent{LastSeen: now.Add(-6 * time.Second), Interval: 5 * time.Second, KubeletHealthy: true}, nil, Config{}, detectors.Partitioned, []string{"lost after 15s"}},
		{"more missed heartbeats allowed", staleLease, agentAged(4*time.Second, true), nil, Config{MissedHeartbeats: 5}, detectors.Suspect, []string{"lost after 5s"}},
		{"no lease observation", detectors.Observation{}, agentAged(0, true), nil, Config{}, detectors.Suspect, []string{"no Lease observation"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(Signals{Node: "n1", Lease: tt.lease, Agent: tt.agent, Peers: tt.peers}, tt.cfg, now)
			if got.Verdict != tt.want {
				t.Errorf("verdict = %s, want %s (reason %q)", got.Verdict, tt.want, got.Reason)
			}
			for _, s := range append(tt.reason, "API: ", "agent: ", "peers: ") {
				if !strings.Contains(got.Reason, s) {
					t.Errorf("reason %q does not contain %q", got.Reason, s)
				}
			}
		})
	}
}

// TestNeverDeadWhileAlive is invariant 4: whatever the API server says, a node whose agent
// heartbeats are fresh, or that a fresh peer report reaches, is never Dead.
func TestNeverDeadWhileAlive(t *testing.T) {
	leases := []detectors.Observation{freshLease, lateLease, staleLease, leaseAged(time.Hour), {}}
	for _, l := range leases {
		for _, kubelet := range []bool{true, false} {
			for _, agentAge := range []time.Duration{0, 900 * time.Millisecond, 1500 * time.Millisecond} {
				got := Classify(Signals{Lease: l, Agent: agentAged(agentAge, kubelet)}, Config{}, now)
				if got.Verdict == detectors.Dead {
					t.Errorf("fresh agent (%s old), lease %q: Dead (%s)", agentAge, l.Reason, got.Reason)
				}
			}
			for _, a := range []Agent{noAgent, lostAgent, agentAged(2500*time.Millisecond, kubelet)} {
				peers := []PeerReport{peer("n2", false, 0), peer("n3", true, 9*time.Second)}
				got := Classify(Signals{Lease: l, Agent: a, Peers: peers}, Config{}, now)
				if got.Verdict == detectors.Dead {
					t.Errorf("peer reaches it, lease %q: Dead (%s)", l.Reason, got.Reason)
				}
			}
		}
	}
}

// TestVerdictWithinMissedHeartbeats follows a node that dies at t0 after its Lease already
// expired: the verdict is Dead once three heartbeat intervals have passed, not before.
func TestVerdictWithinMissedHeartbeats(t *testing.T) {
	t0 := now
	agent := Agent{LastSeen: t0, Interval: time.Second, KubeletHealthy: true}
	var got []detectors.Verdict
	for _, after := range []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 3100 * time.Millisecond} {
		at := t0.Add(after)
		l := Signals{Lease: detectors.Observation{Verdict: detectors.Dead, Reason: "Lease expired"}, Agent: agent}
		got = append(got, Classify(l, Config{}, at).Verdict)
	}
	want := []detectors.Verdict{detectors.Partitioned, detectors.Partitioned, detectors.Suspect, detectors.Suspect, detectors.Dead}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts over time (-want +got):\n%s", diff)
	}
}

func TestClassifyTimes(t *testing.T) {
	t.Run("last seen is the freshest signal", func(t *testing.T) {
		got := Classify(Signals{Lease: staleLease, Agent: lostAgent, Peers: []PeerReport{peer("n2", true, 2*time.Second)}}, Config{}, now)
		if want := now.Add(-2 * time.Second); !got.LastSeen.Equal(want) || got.Age != 2*time.Second {
			t.Errorf("last seen %s age %s, want %s age 2s", got.LastSeen, got.Age, want)
		}
	})
	t.Run("the node's acknowledged probe of a peer is a signal", func(t *testing.T) {
		got := Classify(Signals{Lease: staleLease, Agent: lostAgent, Peers: []PeerReport{peer("n2", false, time.Second), inbound("n2", 3*time.Second)}}, Config{}, now)
		if want := now.Add(-3 * time.Second); !got.LastSeen.Equal(want) {
			t.Errorf("last seen %s, want %s, when the node's probe of n2 was acknowledged", got.LastSeen, want)
		}
	})
	t.Run("healthy deadline is the lease's", func(t *testing.T) {
		got := Classify(Signals{Lease: freshLease, Agent: agentAged(0, true)}, Config{}, now)
		if !got.Deadline.Equal(freshLease.Deadline) || !got.LeaseExpiry {
			t.Errorf("deadline %s (Lease expiry %v), want %s, the Lease's expiry", got.Deadline, got.LeaseExpiry, freshLease.Deadline)
		}
	})
	t.Run("lost agent deadline is the next peer reports', not the Lease's expiry", func(t *testing.T) {
		got := Classify(Signals{Lease: freshLease, Agent: lostAgent, LeaseRenewalSeen: now.Add(-10 * time.Second)}, Config{}, now)
		if got.Verdict.Failed() || got.LeaseExpiry || got.Deadline.After(now.Add(time.Second)) {
			t.Errorf("%s, deadline in %s (Lease expiry %v), want not failed, within an interval, not the Lease's", got.Verdict, got.Deadline.Sub(now), got.LeaseExpiry)
		}
	})
	t.Run("late agent deadline is when it is lost", func(t *testing.T) {
		a := agentAged(2*time.Second, true)
		got := Classify(Signals{Lease: staleLease, Agent: a}, Config{}, now)
		if want := a.LastSeen.Add(3 * time.Second); !got.Deadline.Equal(want) {
			t.Errorf("deadline %s, want %s", got.Deadline, want)
		}
	})
}

// TestFastDead: before the Lease expires, a node counts as Dead only when every path is silent
// since its agent's last heartbeat and its kubelet missed a Lease renewal; any sign of life
// since, or a renewal not yet due, keeps it out of Dead.
func TestFastDead(t *testing.T) {
	lost := agentAged(4*time.Second, true) // lost after 3s: last heartbeat at now-4s
	before := now.Add(-12 * time.Second)   // a Lease renewal seen before that heartbeat, its next one missed
	after := now.Add(-2 * time.Second)     // and one seen after it
	n2Fails := []PeerReport{peer("n2", false, time.Second)}
	tests := []struct {
		name    string
		lease   detectors.Observation
		agent   Agent
		peers   []PeerReport
		renewal time.Time
		every   time.Duration // the kubelet's renewal interval; 0: the default 10s
		seeing  time.Time     // since when the controller could see renewals; zero: always
		cfg     Config
		want    detectors.Verdict
		reason  string
		recheck bool // Deadline at most one interval away
	}{
		{"everything silent since the last heartbeat, a renewal missed", freshLease, lost, n2Fails, before, 0, time.Time{}, Config{}, detectors.Dead, "cannot reach the node since its last heartbeat", false},
		{"late lease, everything silent", lateLease, lost, []PeerReport{peer("n2", false, time.Second), peer("n3", false, 500*time.Millisecond)}, before, 0, time.Time{}, Config{}, detectors.Dead, "2 peer(s) cannot reach", false},
		{"renewal missed by exactly the margin", freshLease, lost, n2Fails, now.Add(-11 * time.Second), 0, time.Time{}, Config{}, detectors.Dead, "the kubelet missed its Lease renewal (none seen for 11s, renewed every 10s", false},
		{"renewal not yet missed: the agent killed and the peers cut, the kubelet renewing on time", freshLease, lost, n2Fails, now.Add(-4600 * time.Millisecond), 0, time.Time{}, Config{}, detectors.Suspect, "next Lease renewal is not due until 2026-11-22T10:00:06Z", true},
		{"renewal a hair short of missed", freshLease, lost, n2Fails, now.Add(-10900 * time.Millisecond), 0, time.Time{}, Config{}, detectors.Suspect, "not due until", true},
		{"the Lease's own interval: renewal seen before the next heartbeat was due, then missed", freshLease, lost, n2Fails, now.Add(-3500 * time.Millisecond), 2 * time.Second, time.Time{}, Config{}, detectors.Dead, "renewed every 2s", false},
		{"Lease renewed after the agent went silent: not dead", freshLease, lost, n2Fails, after, 0, time.Time{}, Config{}, detectors.Healthy, "the Lease was renewed since its last heartbeat", true},
		{"renewal never seen: not dead", freshLease, lost, n2Fails, time.Time{}, 0, time.Time{}, Config{}, detectors.Suspect, "Lease fresh", true},
		{"the node's acknowledged probe of a peer since the silence: not dead", freshLease, lost, []PeerReport{peer("n2", false, time.Second), inbound("n2", 500*time.Millisecond)}, before, 0, time.Time{}, Config{}, detectors.Suspect, "not reached by [n2], reaches [n2]", true},
		{"one peer still reaches it", freshLease, lost, []PeerReport{peer("n2", false, time.Second), peer("n3", true, time.Second)}, before, 0, time.Time{}, Config{}, detectors.Suspect, "reached by [n3]", true},
		{"peer failures older than the silence do not count", freshLease, lost, []PeerReport{peer("n2", false, 5*time.Second)}, before, 0, time.Time{}, Config{}, detectors.Suspect, "waiting for 1 peer report", true},
		{"no peer report yet: look again within an interval", freshLease, lost, nil, before, 0, time.Time{}, Config{}, detectors.Suspect, "waiting for 1 peer report", true},
		{"quorum of peers configurable", freshLease, lost, []PeerReport{peer("n2", false, time.Second)}, before, 0, time.Time{}, Config{MinPeerReports: 2}, detectors.Suspect, "waiting for 2 peer report", true},
		{"agent only late: not yet", freshLease, agentAged(2*time.Second, true), []PeerReport{peer("n2", false, time.Second)}, before, 0, time.Time{}, Config{}, detectors.Suspect, "Lease fresh", false},
		{"the controller blind until 2s ago: the kubelet, which could not renew either, gets an interval from then", freshLease, lost, n2Fails, before, 0, now.Add(-2 * time.Second), Config{}, detectors.Suspect, "not due until 2026-11-22T10:00:09Z (renewed every 10s, counted from 2026-11-22T09:59:58Z when the controller could see renewals again)", true},
		{"seeing again for an interval and the margin, no renewal since: dead", freshLease, lost, n2Fails, before, 0, now.Add(-11 * time.Second), Config{}, detectors.Dead, "counted from 2026-11-22T09:59:49Z when the controller could see renewals again", false},
		{"seeing since before the renewal: the renewal counts", freshLease, lost, n2Fails, before, 0, now.Add(-20 * time.Second), Config{}, detectors.Dead, "renewed every 10s; Lease not yet expired", false},
		{"agent fresh, peers cut off from it: healthy", freshLease, agentAged(0, true), []PeerReport{peer("n2", false, time.Second)}, before, 0, time.Time{}, Config{}, detectors.Healthy, "not reached by [n2]", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(Signals{Node: "n1", Lease: tt.lease, Agent: tt.agent, Peers: tt.peers, LeaseRenewalSeen: tt.renewal, LeaseRenewInterval: tt.every, LeaseSeeingSince: tt.seeing}, tt.cfg, now)
			if got.Verdict != tt.want || !strings.Contains(got.Reason, tt.reason) {
				t.Fatalf("got %s %q, want %s with %q", got.Verdict, got.Reason, tt.want, tt.reason)
			}
			if soon := !got.Deadline.After(now.Add(time.Second)); soon != tt.recheck {
				t.Errorf("deadline in %s; want within one interval: %v", got.Deadline.Sub(now), tt.recheck)
			}
		})
	}
}

// TestFastDeadWaitsAsLateAsRenewalsCome: the renewal counts as missed only twice as late as
// renewals have come lately (a loaded API server, a slow path), and RenewalMargin late at the
// least: a node whose kubelet still renews, as late as the others, does not read Dead.
func TestFastDeadWaitsAsLateAsRenewalsCome(t *testing.T) {
	lost := agentAged(4*time.Second, true)
	n2Fails := []PeerReport{peer("n2", false, time.Second)}
	for _, tt := range []struct {
		name                 string
		lateness, renewedAgo time.Duration
		want                 detectors.Verdict
		reason               string
	}{
		{"renewals 3s late: a renewal 3s late is not missed", 3 * time.Second, 13 * time.Second, detectors.Suspect,
			"not due until 2026-11-22T10:00:03Z (renewed every 10s, allowed 6s late as renewals came up to 3s late lately)"},
		{"renewals 3s late: one 6s late is", 3 * time.Second, 16 * time.Second, detectors.Dead,
			"none seen for 16s, renewed every 10s, allowed 6s late as renewals came up to 3s late lately; Lease not yet expired"},
		{"renewals 0.6s late: 1.2s allowed", 600 * time.Millisecond, 11 * time.Second, detectors.Suspect, "allowed 1.2s late"},
		{"renewals on time (the jitter): the margin", 400 * time.Millisecond, 11 * time.Second, detectors.Dead, "renewed every 10s; Lease not yet expired"},
		{"no lateness known: the margin", 0, 11 * time.Second, detectors.Dead, "renewed every 10s; Lease not yet expired"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(Signals{Node: "n1", Lease: freshLease, Agent: lost, Peers: n2Fails, LeaseRenewalSeen: now.Add(-tt.renewedAgo), LeaseRenewalLateness: tt.lateness}, Config{}, now)
			if got.Verdict != tt.want || !strings.Contains(got.Reason, tt.reason) {
				t.Fatalf("got %s %q, want %s with %q", got.Verdict, got.Reason, tt.want, tt.reason)
			}
		})
	}
	if got, want := RenewalMarginFor(5*time.Second), 10*time.Second; got != want {
		t.Errorf("RenewalMarginFor(5s) = %s, want %s", got, want)
	}
}
