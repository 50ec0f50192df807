package fencing

import (
	"context"
	"time"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/providers"
)

// ReasonExecutorFailed: the node's agent could not terminate or confirm the workload.
const ReasonExecutorFailed = "ExecutorFailed"

// terminate orders the node's agent to terminate the workload. The order's id is the fence's
// UID, so a resumed controller re-sends the same order and the agent runs it once.
func (r *NodeFenceReconciler) terminate(ctx context.Context, nf *v1alpha1.NodeFence, i int) outcome {
	m := nf.Spec.Methods[i]
	if r.Terminator == nil {
		return failed(ReasonNoProvider, "no executor channel: start the controller with --agent-listen-address")
	}
	var grace *int64
	if m.Executor != nil {
		grace = m.Executor.GracePeriodSeconds
	}
	o := order(nf, grace)
	if err := r.Terminator.Terminate(ctx, o); err != nil {
		return r.providerFailure(nf, m, "ordering the termination", err)
	}
	return done("termination ordered from the agent of node %s %s", nf.Spec.NodeName, viaText(o.Via))
}

// order is the fence's order to the node's agent: through the API server for a node whose
// kubelet is down (its agent sees the API server), straight from the controller otherwise (a
// partitioned node cannot see the API server; a manual request may concern either).
func order(nf *v1alpha1.NodeFence, grace *int64) providers.TerminateOrder {
	o := providers.TerminateOrder{Node: nf.Spec.NodeName, ID: string(nf.UID), GracePeriodSeconds: grace, Via: providers.ViaDirect}
	if nf.Spec.Verdict == string(detectors.KubeletDown) {
		o.Via = providers.ViaAPI
	}
	return o
}

func viaText(v providers.Via) string {
	if v == providers.ViaAPI {
		return "through the API server (annotation " + v1alpha1.AnnotationExecutorCommand + " on this NodeFence)"
	}
	return "over the direct channel (the answer to its next heartbeat)"
}

// confirmTerminated waits for the agent's confirmed read-back.
func (r *NodeFenceReconciler) confirmTerminated(ctx context.Context, nf *v1alpha1.NodeFence, i int) outcome {
	m := nf.Spec.Methods[i]
	state, msg, err := r.Terminator.Termination(ctx, order(nf, nil))
	if err != nil {
		return r.providerFailure(nf, m, "reading the termination back", err)
	}
	switch state {
	case providers.TerminationConfirmed:
		return done("the agent confirms no workload container runs: %s", msg)
	case providers.TerminationFailed:
		return failed(ReasonExecutorFailed, "the agent of node %s could not terminate the workload: %s", nf.Spec.NodeName, msg)
	}
	if r.timedOut(nf, m) {
		return failed(ReasonMethodTimedOut, "no confirmed termination within the method's timeout %s (last: %s %s)", methodTimeout(m), state, msg)
	}
	return pending(500*time.Millisecond, string(state), "termination %s: %s", state, msg)
}
