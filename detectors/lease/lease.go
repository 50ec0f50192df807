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

// Observe classifies node from its Lease (nil when it has none): Healthy while the last
// renewal is younger than half of timeout, Suspect until timeout, Dead after it.
func Observe(node *corev1.Node, lease *coordinationv1.Lease, timeout time.Duration, now time.Time) detectors.Observation {
	last, source := lastSignal(node, lease)
	obs := detectors.Observation{Node: node.Name, LastSeen: last, Deadline: last.Add(timeout)}
	if last.IsZero() {
		obs.Verdict = detectors.Suspect
		obs.Deadline = node.CreationTimestamp.Add(timeout)
		obs.Reason = "no Lease renewal and no Ready heartbeat seen yet"
		if now.After(obs.Deadline) {
			obs.Verdict = detectors.Dead
		}
		return obs
	}
	obs.Age = now.Sub(last)
	switch {
	case obs.Age > timeout:
		obs.Verdict = detectors.Dead
		obs.Reason = fmt.Sprintf("%s not renewed for %s (threshold %s)", source, obs.Age.Round(100*time.Millisecond), timeout)
	case obs.Age > timeout/2:
		obs.Verdict = detectors.Suspect
		obs.Reason = fmt.Sprintf("%s last renewed %s ago (threshold %s)", source, obs.Age.Round(100*time.Millisecond), timeout)
	default:
		obs.Verdict = detectors.Healthy
		obs.Reason = fmt.Sprintf("%s renewed %s ago", source, obs.Age.Round(100*time.Millisecond))
	}
	return obs
}

func lastSignal(node *corev1.Node, lease *coordinationv1.Lease) (time.Time, string) {
	if lease != nil && lease.Spec.RenewTime != nil {
		return lease.Spec.RenewTime.Time, "Lease"
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && !c.LastHeartbeatTime.IsZero() {
			return c.LastHeartbeatTime.Time, "Ready heartbeat"
		}
	}
	return time.Time{}, ""
}
