package fencing

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// The boots of a fence (invariant 5): a released node counts as rebooted since its fence only
// with a boot ID other than every one it was seen in up to the fence's confirmation — the one
// recorded when the fence began (status.bootID) and those read at each method's confirmation
// (status.confirmedBootIDs). A node that rebooted while its fence was under way (its kubelet
// down, an Executor order pending) is fenced in its new boot: back in that boot, it has not
// rebooted since the fence acted.

// noteBoots records, with a method's confirmation, the boot IDs the node is seen in then: its
// Node's (status.nodeInfo.bootID, read from the API server) and its agent's latest heartbeat's.
// Either may be behind (a kubelet down does not post; an agent gone does not heartbeat), so both
// are kept. A Node that no longer exists has none.
func (r *NodeFenceReconciler) noteBoots(ctx context.Context, nf *v1alpha1.NodeFence) error {
	node := &corev1.Node{}
	if err := r.reader().Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading the boot ID of node %s at the confirmation: %w", nf.Spec.NodeName, err)
	}
	seen := []string{node.Status.NodeInfo.BootID}
	if r.Heartbeats != nil {
		if hb, _, ok := r.Heartbeats.Latest(nf.Spec.NodeName); ok {
			seen = append(seen, hb.BootID)
		}
	}
	for _, boot := range seen {
		if boot != "" && !bootOfFence(nf, boot) {
			nf.Status.ConfirmedBootIDs = append(nf.Status.ConfirmedBootIDs, boot)
		}
	}
	return nil
}

// bootOfFence says whether boot is one the node was seen in up to its fence's confirmation.
func bootOfFence(nf *v1alpha1.NodeFence, boot string) bool {
	return boot == nf.Status.BootID || slices.Contains(nf.Status.ConfirmedBootIDs, boot)
}
