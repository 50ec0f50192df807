package lease

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"palisade.dev/palisade/detectors"
)

// Namespace holds the node Leases.
const Namespace = "kube-node-lease"

// MinRenewals is how many of its kubelet's renewal intervals a node's Lease is given at the
// least before it counts as expired, whatever the policy's leaseTimeout. One would not do: the
// renewal due at the expiry comes a little after it (the kubelet's jitter, up to 4 %, its PUT,
// the watch), so a node renewing on time would read as expired a moment every interval. Two
// is the default leaseTimeout's margin (20 s over the default 10 s interval): one renewal may
// be late without the node counting as failed.
const MinRenewals = 2

// Timeout is the lease timeout that node Lease l (nil: none) is judged with under a policy's
// timeout: timeout, raised to MinRenewals of the kubelet's renewal intervals (RenewInterval)
// when shorter. A policy's 5 s over kubelets that renew every 10 s would otherwise read every
// healthy node as late, then expired, half of each interval, and fence it; a kubelet tuned to
// renew every 2.5 s (nodeLeaseDurationSeconds 10) keeps the 5 s.
func Timeout(l *coordinationv1.Lease, timeout time.Duration) time.Duration {
	return max(timeout, MinRenewals*RenewInterval(l))
}

// Observe classifies node from its Lease (nil when it has none) under the policy's timeout,
// raised for the node's kubelet as Timeout says: Healthy while the last renewal is younger than
// half of it, Suspect until it, Dead after it.
func Observe(node *corev1.Node, lease *coordinationv1.Lease, timeout time.Duration, now time.Time) detectors.Observation {
	return observeSeen(node, lease, time.Time{}, timeout, now)
}

// observeSeen is Observe with the Lease's age counted from seen, when the controller first saw
// its renewal on its own clock (zero: from its renewTime, the node's clock). LastSeen stays the
// signal's own time.
func observeSeen(node *corev1.Node, lease *coordinationv1.Lease, seen time.Time, policy time.Duration, now time.Time) detectors.Observation {
	timeout := Timeout(lease, policy)
	last, source := lastSignal(node, lease)
	from := last
	if !seen.IsZero() && source == "Lease" {
		from = seen
	}
	obs := detectors.Observation{Node: node.Name, LastSeen: last, Deadline: from.Add(timeout), Timeout: timeout}
	if last.IsZero() {
		obs.Verdict = detectors.Suspect
		obs.Deadline = node.CreationTimestamp.Add(timeout)
		obs.Reason = "no Lease renewal and no Ready heartbeat seen yet"
		if now.After(obs.Deadline) {
			obs.Verdict = detectors.Dead
		}
		return obs
	}
	obs.Age = now.Sub(from)
	obs.LeaseExpiry = true
	switch {
	case obs.Age > timeout && source == readyHeartbeat && NodeReady(node):
		// No Lease to judge by, and a kubelet that renews one posts its Ready heartbeat only
		// on a change or every few minutes (nodeStatusReportFrequency, 5 min by default): an
		// old heartbeat says nothing while Ready is True. A kubelet that stopped has Ready
		// turned Unknown by the node lifecycle controller (40–50 s), and then it counts.
		obs.Verdict, obs.LeaseExpiry = detectors.Suspect, false
		obs.Deadline = now.Add(timeout)
		obs.Reason = fmt.Sprintf("no Lease; its Ready heartbeat is %s old (threshold %s), but its Ready condition is True: judged when the node lifecycle controller marks it not Ready",
			obs.Age.Round(100*time.Millisecond), threshold(lease, policy))
	case obs.Age > timeout:
		obs.Verdict = detectors.Dead
		obs.Reason = fmt.Sprintf("%s not renewed for %s (threshold %s)", source, obs.Age.Round(100*time.Millisecond), threshold(lease, policy))
	case obs.Age > timeout/2:
		obs.Verdict = detectors.Suspect
		obs.Reason = fmt.Sprintf("%s last renewed %s ago (threshold %s)", source, obs.Age.Round(100*time.Millisecond), threshold(lease, policy))
	default:
		obs.Verdict = detectors.Healthy
		obs.Reason = fmt.Sprintf("%s renewed %s ago", source, obs.Age.Round(100*time.Millisecond))
	}
	return obs
}

// threshold names the timeout Lease l is judged with, and why when it is not the policy's.
func threshold(l *coordinationv1.Lease, policy time.Duration) string {
	timeout := Timeout(l, policy)
	if timeout == policy {
		return timeout.String()
	}
	return fmt.Sprintf("%s: leaseTimeout %s raised to %d of the kubelet's %s renewal intervals", timeout, policy, MinRenewals, RenewInterval(l))
}

func lastSignal(node *corev1.Node, lease *coordinationv1.Lease) (time.Time, string) {
	if lease != nil && lease.Spec.RenewTime != nil {
		return lease.Spec.RenewTime.Time, "Lease"
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && !c.LastHeartbeatTime.IsZero() {
			return c.LastHeartbeatTime.Time, readyHeartbeat
		}
	}
	return time.Time{}, ""
}

// readyHeartbeat names the Ready condition's lastHeartbeatTime as a node's last signal.
const readyHeartbeat = "Ready heartbeat"

// NodeReady says whether node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ObserveSince judges node like Observe, for a controller that could see renewals only since
// seeing (zero: always; why names the cause): a Lease's age counts only time in which a
// renewal could have been seen, so a node whose last signal is older than seeing gets a fresh
// period, its timeout (Timeout) from seeing, before it can turn Dead. LastSeen and Age stay the
// signal's own.
func ObserveSince(node *corev1.Node, lease *coordinationv1.Lease, timeout time.Duration, now, seeing time.Time, why string) detectors.Observation {
	return ObserveSeenSince(node, lease, time.Time{}, timeout, now, seeing, why)
}

// ObserveSeenSince is ObserveSince with the Lease's age counted from seen, when the controller
// first saw its renewal, on its own clock (zero: unknown, from its renewTime). The kubelet
// stamps renewTime with the node's clock: a node whose clock lags the controller's by more than
// half the timeout would read late, or failed, while it renews on time, and one whose clock
// runs ahead would read fresh long after it stopped (Kubernetes' node lifecycle controller
// judges by when it saw a renewal for the same reason). LastSeen stays the renewTime.
func ObserveSeenSince(node *corev1.Node, lease *coordinationv1.Lease, seen time.Time, timeout time.Duration, now, seeing time.Time, why string) detectors.Observation {
	obs := observeSeen(node, lease, seen, timeout, now)
	timeout = obs.Timeout // the fresh period is as long as the node's own
	fresh := seeing.Add(timeout)
	if seeing.IsZero() || !obs.Deadline.Before(fresh) || now.After(fresh) {
		return obs
	}
	obs.Deadline, obs.LeaseExpiry = fresh, false
	obs.Verdict = detectors.Healthy
	if now.Sub(seeing) > timeout/2 {
		obs.Verdict = detectors.Suspect
	}
	last := "no signal yet"
	if !obs.LastSeen.IsZero() {
		last = fmt.Sprintf("last signal %s ago", obs.Age.Round(100*time.Millisecond))
	}
	obs.Reason = fmt.Sprintf("%s, but the controller could see renewals only since %s (%s): a fresh lease period until %s",
		last, seeing.UTC().Format(time.RFC3339), why, fresh.UTC().Format(time.RFC3339))
	return obs
}

// RenewInterval is how often the node's kubelet renews its Lease: a quarter of the Lease's
// leaseDurationSeconds, as the kubelet's lease controller does;
// detectors.DefaultLeaseRenewInterval when the Lease (nil: none) says nothing.
func RenewInterval(l *coordinationv1.Lease) time.Duration {
	if l != nil && l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second / 4
	}
	return detectors.DefaultLeaseRenewInterval
}
