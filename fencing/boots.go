package fencing

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// The boots of a fence (invariant 5): a released node counts as rebooted since its fence only
// with a boot ID other than every one it was seen in up to the fence's confirmation — the one
// recorded when the fence began (status.bootID), those read at each method's confirmation
// (status.confirmedBootIDs) and the one its agent last reported (status.agentBootID). A node
// that rebooted while its fence was under way (its kubelet down, an Executor order pending) is
// fenced in its new boot: back in that boot, it has not rebooted since the fence acted.
//
// A new boot ID is the kubelet's report, and a kubelet's credentials can be stolen. A fence
// that confirmed its machine off (and was not disproved since) needs no more: whatever ran on
// it died. One that kept it on (the Executor, a storage fence, a self-fence, a power-off
// disproved) takes the reboot as proven only when the node's agent heartbeats from the new
// boot too (rebootUnconfirmed), whenever the node has an agent: the fence heard it
// (status.agentBootID), an agent method (the Executor, a self-fence) confirmed it, or this
// controller holds a heartbeat of it now. A second witness, not proof against an attacker who
// holds the node's kubelet credentials and reaches the controller: those credentials can
// obtain a token of the agent's pod, and with it an agent certificate.

// noteBoots records, with a method's confirmation, its Lease's renewTime
// (status.confirmedLeaseRenewTime) and the boot IDs the node is seen in then: its
// Node's (status.nodeInfo.bootID, read from the API server), its agent's latest heartbeat's
// and answered, the one the provider's read-back saw (the executor's answer; "" for none).
// Any of them may be behind (a kubelet down does not post; an agent gone does not heartbeat;
// a new leader has heard no heartbeat yet), so all are kept. status.agentBootID takes the
// agent's latest word, the answer before a held heartbeat (which may be older); the one it
// held before stays among the confirmed boots. A Node that no longer exists has none.
func (r *NodeFenceReconciler) noteBoots(ctx context.Context, nf *v1alpha1.NodeFence, answered string) error {
	node := &corev1.Node{}
	if err := r.reader().Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading the boot ID of node %s at the confirmation: %w", nf.Spec.NodeName, err)
	}
	l, err := r.lease(ctx, nf.Spec.NodeName) // liveness.go: VerifyFenced's baseline, however late it looks
	if err != nil {
		return fmt.Errorf("reading the Lease of node %s at the confirmation: %w", nf.Spec.NodeName, err)
	}
	nf.Status.ConfirmedLeaseRenewTime = nil
	if l != nil {
		nf.Status.ConfirmedLeaseRenewTime = l.Spec.RenewTime
	}
	held := r.agentBoot(nf.Spec.NodeName)
	for _, boot := range []string{node.Status.NodeInfo.BootID, answered, held, nf.Status.AgentBootID} {
		if boot != "" && boot != nf.Status.BootID && !slices.Contains(nf.Status.ConfirmedBootIDs, boot) {
			nf.Status.ConfirmedBootIDs = append(nf.Status.ConfirmedBootIDs, boot)
		}
	}
	for _, boot := range []string{answered, held} {
		if boot != "" {
			nf.Status.AgentBootID = boot
			break
		}
	}
	return nil
}

// agentBoot is the boot ID in the latest heartbeat this controller holds from node's agent, ""
// when it holds none (no agent, none heard since this controller began leading, or a heartbeat
// without one).
func (r *NodeFenceReconciler) agentBoot(node string) string {
	if r.Heartbeats == nil {
		return ""
	}
	hb, _, ok := r.Heartbeats.Latest(node)
	if !ok {
		return ""
	}
	return hb.BootID
}

// bootOfFence says whether boot is one the node was seen in up to its fence's confirmation.
func bootOfFence(nf *v1alpha1.NodeFence, boot string) bool {
	return boot == nf.Status.BootID || boot == nf.Status.AgentBootID || slices.Contains(nf.Status.ConfirmedBootIDs, boot)
}

// rebootUnconfirmed says why a node back in boot (a boot not of its fence, as its kubelet
// reports it) is not yet proven rebooted, "" when it is: its fence kept its machine on, the
// node has an agent, and agentBoot (the boot ID of its latest heartbeat held here, "" for
// none) is another.
func rebootUnconfirmed(nf *v1alpha1.NodeFence, boot, agentBoot string) string {
	keptOn := poweredOff(nf) == nil || nf.Status.PowerOffDisprovedTime != nil
	hasAgent := nf.Status.AgentBootID != "" || agentBoot != "" || confirmedByAgent(nf)
	if !keptOn || !hasAgent || agentBoot == boot {
		return ""
	}
	if agentBoot == "" {
		return "this controller holds no heartbeat of its agent that carries a boot ID (none heard since it began leading, or its agent cannot read its boot ID)"
	}
	if bootOfFence(nf, agentBoot) {
		return fmt.Sprintf("its agent still heartbeats from boot ID %s, a boot of the fence", agentBoot)
	}
	return fmt.Sprintf("its agent heartbeats from another boot ID, %s", agentBoot)
}

// confirmedByAgent says whether a method carried out by the node's agent (the Executor, a
// self-fence) confirmed the fence: the node had an agent.
func confirmedByAgent(nf *v1alpha1.NodeFence) bool {
	for _, st := range nf.Status.Steps {
		if st.State == v1alpha1.StepSucceeded && (st.Name == v1alpha1.StepConfirmTerminated || st.Name == v1alpha1.StepConfirmSelfFenced) {
			return true
		}
	}
	return false
}

// clockSkewMargin is how far a kubelet's clock may run ahead of the controller's before a
// status it posted before a fence's confirmation reads as one posted after it.
const clockSkewMargin = 30 * time.Second

// readyPostedAfter is when the node's kubelet last posted its Ready condition, if that was
// more than clockSkewMargin after t (the heartbeat is the kubelet's clock, t the controller's):
// a Ready condition that merely has not been marked stale yet is from before. A kubelet back
// after a partition posts at once when node lifecycle marked it NotReady meanwhile, within its
// status report frequency (5 min by default) otherwise. The API server's own time of the
// kubelet's last status write (its managedFields entry) counts too: a kubelet whose clock runs
// minutes behind (an RTC reset, a clock stepped back) stamps its heartbeat before t.
func readyPostedAfter(node *corev1.Node, t *metav1.Time) (time.Time, bool) {
	if t == nil {
		return time.Time{}, false
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.LastHeartbeatTime.After(t.Add(clockSkewMargin)) {
			return c.LastHeartbeatTime.Time, true
		}
	}
	for _, mf := range node.ManagedFields {
		if kubeletStatusWrite(mf) && mf.Time != nil && mf.Time.After(t.Add(clockSkewMargin)) {
			return mf.Time.Time, true
		}
	}
	return time.Time{}, false
}

// kubeletStatusWrite says whether a managedFields entry is the kubelet's status writes: through
// the status subresource, by the manager named "kubelet" (the API server names a manager from
// the writer's user agent: the binary's name, "k3s" on k3s, "kubelite" on MicroK8s) or owning
// status.nodeInfo, which only the kubelet writes.
func kubeletStatusWrite(mf metav1.ManagedFieldsEntry) bool {
	if mf.Subresource != "status" {
		return false
	}
	return mf.Manager == "kubelet" || mf.FieldsV1 != nil && bytes.Contains(mf.FieldsV1.Raw, []byte(`"f:nodeInfo"`))
}
