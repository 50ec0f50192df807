package fencing

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// takeMethod takes a method's step through the provider registered for its type: the fence
// step starts the fence, the confirmation step reads it back (invariant 1: confirm, don't
// assume).
func (r *NodeFenceReconciler) takeMethod(ctx context.Context, nf *v1alpha1.NodeFence, a action) outcome {
	m := nf.Spec.Methods[a.method]
	kind, known := methodKinds[m.Type]
	fencer, ok := r.Fencers[m.Type]
	if !known || !ok || fencer == nil {
		return failed(ReasonNoProvider, "no provider is registered for method type %s", m.Type)
	}
	req := r.request(nf, m)
	switch a.step {
	case kind.fence:
		if kind.lifted {
			if err := r.holdForLift(ctx, nf); err != nil {
				return pending(retryConfirm, ReasonAPIError, "before putting up a storage fence: %v", err)
			}
		}
		if out, named := r.nameTarget(ctx, fencer, req); !named {
			return out
		}
		return fence(ctx, fencer, req)
	case kind.confirm:
		out := confirm(ctx, fencer, req)
		if out.state == v1alpha1.StepSucceeded {
			if err := r.noteBoots(ctx, nf, out.bootID); err != nil { // boots.go: recorded with the confirmation
				if r.pastTimeout(nf, m, bootReadGrace) { // the chain goes on (a power-off next)
					return failed(ReasonAPIError, "the method's time (and %s more) ran out before the node's boot ID could be read with its confirmation (recorded with it, so that a node that rebooted during the fence is not taken for rebooted after it): %v", bootReadGrace, err)
				}
				return pending(retryConfirm, ReasonAPIError, "%v", err)
			}
		}
		return out
	}
	return failed(ReasonUnknownStep, "step %q is not one of method type %s", a.step, m.Type)
}

func (r *NodeFenceReconciler) request(nf *v1alpha1.NodeFence, m v1alpha1.Method) providers.Request {
	req := providers.Request{Fence: nf, Method: m, Now: r.now(), Expired: r.timedOut(nf, m)}
	if len(nf.Status.Steps) > 0 {
		req.Attempt = lastStep(nf).Attempts
	}
	return req
}

// nameTarget records on the fence step, before its command is sent, the machine the method acts
// on (a provider that names one: providers.TargetNamer): every later call of the method acts
// on that machine or refuses. named is false, with the outcome to record, while the name is
// not recorded yet; a refused write aborts the pass (the copy may be stale: the next pass
// reads afresh).
func (r *NodeFenceReconciler) nameTarget(ctx context.Context, f providers.Fencer, req providers.Request) (outcome, bool) {
	n, ok := f.(providers.TargetNamer)
	step := lastStep(req.Fence)
	if !ok || step.Target != "" {
		return outcome{}, true
	}
	target, err := n.FenceTarget(ctx, req)
	if err != nil {
		return providerFailure(req, "finding the machine to fence", err), false
	}
	if target == "" {
		return outcome{}, true
	}
	step.Target = target
	if err := r.saveStatus(ctx, req.Fence); err != nil {
		return outcome{abort: fmt.Errorf("recording the machine %s before the fence command: %w", target, err)}, false
	}
	return outcome{}, true
}

func fence(ctx context.Context, f providers.Fencer, req providers.Request) outcome {
	st, err := f.Fence(ctx, req)
	if err != nil {
		return providerFailure(req, "starting the fence", err)
	}
	if st.State == providers.Failed {
		return failed(string(st.Reason), "%s", st.Message)
	}
	return done("%s", st.Message)
}

func confirm(ctx context.Context, f providers.Fencer, req providers.Request) outcome {
	st, err := f.Check(ctx, req)
	if err != nil {
		return providerFailure(req, "reading the fence back", err)
	}
	switch st.State {
	case providers.Confirmed:
		out := done("%s", st.Message)
		out.bootID = st.BootID
		return out
	case providers.Gone:
		return done("the machine no longer exists: %s", st.Message)
	case providers.Failed:
		return failed(string(st.Reason), "%s", st.Message)
	}
	if req.Expired {
		return failed(ReasonMethodTimedOut, "no confirmed fence within the method's timeout %s (last: %s %s)", methodTimeout(req.Method), st.State, st.Message)
	}
	reason, retry := string(st.Reason), st.RetryAfter
	if reason == "" {
		reason = ReasonAwaitingConfirmation
	}
	if retry <= 0 {
		retry = retryConfirm
	}
	return pending(retry, reason, "%s", st.Message)
}

// endMethod tells the method's provider that the method is over for this fence (it failed, or
// the fence ended), so that nothing it holds for the fence outlives it: an order waiting for
// the node's agent stops being served.
func (r *NodeFenceReconciler) endMethod(ctx context.Context, nf *v1alpha1.NodeFence, name string) {
	for _, m := range nf.Spec.Methods {
		if m.Name != name {
			continue
		}
		if f, ok := r.Fencers[m.Type]; ok && f != nil {
			if err := f.End(ctx, r.request(nf, m)); err != nil {
				ctrl.LoggerFrom(ctx).Error(err, "ending the method's pending work", "method", m.Name)
			}
		}
	}
}

// endMethods ends every method the fence used.
func (r *NodeFenceReconciler) endMethods(ctx context.Context, nf *v1alpha1.NodeFence) {
	seen := map[string]bool{}
	for _, s := range nf.Status.Steps {
		if s.Method != "" && isFenceStep(s.Name) && !seen[s.Method] {
			seen[s.Method] = true
			r.endMethod(ctx, nf, s.Method)
		}
	}
}

// endDeleted ends every method for a NodeFence deleted before its end (a person's "delete this
// NodeFence to try again"): the fence is over, and so are its orders. A NodeFence is named
// after its node.
func (r *NodeFenceReconciler) endDeleted(ctx context.Context, node string) {
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: v1alpha1.NodeFenceSpec{NodeName: node}}
	for t, f := range r.Fencers {
		if f == nil {
			continue
		}
		if err := f.End(ctx, providers.Request{Fence: nf, Method: v1alpha1.Method{Type: t}, Now: r.now()}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "ending the pending work of a deleted fence", "methodType", t)
		}
	}
}
