package fencing

import (
	"context"
	"time"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// ReasonNodeReachable: a node expected to have fenced itself sent a signal again.
const ReasonNodeReachable = "NodeReachableAgain"

// awaitIsolation notes the node's last signal: the self-fence's safe time counts from it.
func (r *NodeFenceReconciler) awaitIsolation(ctx context.Context, nf *v1alpha1.NodeFence, i int) outcome {
	m := nf.Spec.Methods[i]
	if m.SelfFence == nil {
		return failed(ReasonNoProvider, "method %s has no selfFence settings", m.Name)
	}
	last, err := r.Observer.LastSignal(ctx, nf.Spec.NodeName, r.now())
	if err != nil {
		return pending(retryRelease, "APIError", "%v", err)
	}
	return done("relying on the node's self-fence: last signal at %s; safe %s after it", last.UTC().Format(time.RFC3339), m.SelfFence.SafeAfter.Duration)
}

// confirmSelfFenced waits until the node has sent no signal on any path for safeAfter; a
// signal newer than the wait's start means the node is back and cannot be relied on.
func (r *NodeFenceReconciler) confirmSelfFenced(ctx context.Context, nf *v1alpha1.NodeFence, i int) outcome {
	m := nf.Spec.Methods[i]
	now := r.now()
	last, err := r.Observer.LastSignal(ctx, nf.Spec.NodeName, now)
	if err != nil {
		return pending(retryRelease, "APIError", "%v", err)
	}
	started := awaitStart(nf)
	if last.After(started) {
		return failed(ReasonNodeReachable, "node %s sent a signal at %s after the self-fence wait began: it cannot be relied on to have fenced itself", nf.Spec.NodeName, last.UTC().Format(time.RFC3339))
	}
	if last.IsZero() {
		last = started // no signal known at all: count the safe time from the wait's start
	}
	safe, silent := m.SelfFence.SafeAfter.Duration, now.Sub(last)
	if silent >= safe {
		return done("relied on the node's self-fence: no signal from it on any path for %s (safeAfter %s)", silent.Round(100*time.Millisecond), safe)
	}
	if r.timedOut(nf, m) {
		return failed(ReasonMethodTimedOut, "the self-fence's safe time %s did not pass within the method's timeout %s", safe, methodTimeout(m))
	}
	return pending(min(safe-silent, time.Second), "WaitingForSafeTime", "no signal for %s of the %s safe time", silent.Round(100*time.Millisecond), safe)
}

// awaitStart is when the latest AwaitIsolation step began (the planner always records one
// before ConfirmSelfFenced).
func awaitStart(nf *v1alpha1.NodeFence) time.Time {
	for i := len(nf.Status.Steps) - 1; i >= 0; i-- {
		if nf.Status.Steps[i].Name == v1alpha1.StepAwaitIsolation {
			return nf.Status.Steps[i].StartTime.Time
		}
	}
	return time.Time{}
}
