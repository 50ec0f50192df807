package fencing

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// manualNow says whether the fence's policy, as it stands now, unfences only on request
// (recovery.automatic false), and names it. A NodeFence keeps the policy's recovery as it was
// when the fence began, but an operator who turns automatic recovery off during an incident
// means the fences under way too: the stricter of the two holds. A policy deleted since gives
// nothing (the fence's own copy decides); a failed read is an error (nothing is decided).
func (r *NodeFenceReconciler) manualNow(ctx context.Context, nf *v1alpha1.NodeFence) (bool, error) {
	if nf.Spec.PolicyName == "" {
		return false, nil
	}
	p := &v1alpha1.FencingPolicy{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: nf.Spec.PolicyName}, p); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading policy %s before unfencing node %s: %w", nf.Spec.PolicyName, nf.Spec.NodeName, err)
	}
	a := p.Spec.Recovery.Automatic
	return a != nil && !*a, nil
}

// confirmText says how to confirm node clean by hand.
func confirmText(node string) string {
	return fmt.Sprintf("once you know its workload's processes are gone, confirm it clean: kubectl annotate node %s %s='<how it was made clean>'",
		node, v1alpha1.AnnotationUnfenceRequest)
}
