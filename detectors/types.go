package detectors

import "time"

// Verdict is what the detectors conclude about a node.
type Verdict string

const (
	// Healthy: fresh signals.
	Healthy Verdict = "Healthy"
	// Suspect: signals are late but not yet past the policy's threshold.
	Suspect Verdict = "Suspect"
	// KubeletDown: the node and its agent are alive, the kubelet is not.
	KubeletDown Verdict = "KubeletDown"
	// Partitioned: the node is alive but cut off from the control plane.
	Partitioned Verdict = "Partitioned"
	// Dead: no fresh signal on any path the controller has.
	Dead Verdict = "Dead"
)

// DefaultLeaseRenewInterval is the kubelet's Lease renewal interval when its Lease says nothing:
// a quarter of its default 40s leaseDurationSeconds. It lives here, not in package lease, so that
// classify (which the agent links) needs no Kubernetes API types.
const DefaultLeaseRenewInterval = 10 * time.Second

// Failed says whether the verdict calls for a fence.
func (v Verdict) Failed() bool { return v == Dead || v == Partitioned || v == KubeletDown }

// Observation is one detector's view of one node at one moment.
type Observation struct {
	Node    string
	Verdict Verdict
	// LastSeen is the time of the freshest signal.
	LastSeen time.Time
	// Age is how old that signal was when observed.
	Age time.Duration
	// Deadline is when a Healthy or Suspect node turns failed if nothing new arrives.
	Deadline time.Time
	// LeaseExpiry says that Deadline is the expiry of the node's latest Lease renewal (or Ready
	// heartbeat) and nothing else: the kubelet's next renewals are what move it on. False when
	// the Deadline is a fresh lease period, the first renewal still awaited, or the agents'
	// (whose heartbeats and peer reports call for a look at the Deadline itself).
	LeaseExpiry bool
	// Timeout is the lease timeout the node's Lease was judged with: the policy's, or longer
	// for a kubelet that renews less often than every half of it (lease.Timeout; a node
	// without a Lease, judged by its Ready heartbeat, gets the default interval's two); zero
	// only in the empty Observation returned with an error.
	Timeout time.Duration
	// Reason says why, for events and records.
	Reason string
}
