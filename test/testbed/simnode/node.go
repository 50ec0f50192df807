package simnode

import (
	"context"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// syncNode creates the Node when missing and rewrites its status when the Ready condition is
// not True, its heartbeat is older than statusReportInterval or it reports another boot (with
// Options.ExternalLease: only when it reports another boot).
func (n *Node) syncNode(ctx context.Context) error {
	// kube-controller-manager writes new nodes too (taints, annotations): retry on conflict.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return n.syncNodeOnce(ctx) })
}

func (n *Node) syncNodeOnce(ctx context.Context) error {
	nodes := n.kube.CoreV1().Nodes()
	node, err := nodes.Get(ctx, n.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Create(ctx, n.newNodeObject(), metav1.CreateOptions{})
		if err == nil {
			n.logf("registered node (InternalIP %s)", n.ip)
		}
	}
	if err != nil {
		return fmt.Errorf("registering node %s: %w", n.opts.Name, err)
	}
	n.nodeUID = node.UID
	bootID := n.BootID()
	now := time.Now()
	if statusFresh(node, bootID, now) || (n.opts.ExternalLease && node.Status.NodeInfo.BootID == bootID) {
		return nil
	}
	node = node.DeepCopy()
	n.setNodeStatus(&node.Status, bootID, metav1.NewTime(now))
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return err
		}
		return fmt.Errorf("updating status of node %s: %w", n.opts.Name, err)
	}
	return nil
}

func (n *Node) newNodeObject() *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:   n.opts.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
	}
	maps.Copy(labels, n.opts.Labels)
	annotations := map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}
	maps.Copy(annotations, n.opts.Annotations)
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name, Labels: labels, Annotations: annotations},
		Spec: corev1.NodeSpec{ProviderID: n.opts.ProviderID}}
}

// statusFresh reports whether node says Ready=True for bootID with a recent heartbeat.
func statusFresh(node *corev1.Node, bootID string, now time.Time) bool {
	if node.Status.NodeInfo.BootID != bootID {
		return false
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue && now.Sub(c.LastHeartbeatTime.Time) < statusReportInterval
		}
	}
	return false
}

// setNodeStatus writes what a healthy kubelet reports, keeping conditions of other types.
func (n *Node) setNodeStatus(st *corev1.NodeStatus, bootID string, now metav1.Time) {
	st.Capacity = n.capacity.DeepCopy()
	st.Allocatable = n.capacity.DeepCopy()
	st.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: n.ip},
		{Type: corev1.NodeHostName, Address: n.opts.Name},
	}
	st.DaemonEndpoints = corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}}
	st.NodeInfo = corev1.NodeSystemInfo{
		MachineID:               fmt.Sprintf("simnode-%d", n.seq),
		SystemUUID:              n.systemUUID(),
		BootID:                  bootID,
		KernelVersion:           "6.1.0-simnode",
		OSImage:                 "Palisade simulated node",
		ContainerRuntimeVersion: "simnode://1.0.0",
		KubeletVersion:          kubeletVersion,
		OperatingSystem:         "linux",
		Architecture:            "amd64",
	}
	for _, c := range []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
	} {
		setNodeCondition(st, c, now)
	}
}

// systemUUID is Options.SystemUUID, or simnode-<n>.
func (n *Node) systemUUID() string {
	if n.opts.SystemUUID != "" {
		return n.opts.SystemUUID
	}
	return fmt.Sprintf("simnode-%d", n.seq)
}

// setNodeCondition sets c with a fresh heartbeat; LastTransitionTime changes only with Status.
func setNodeCondition(st *corev1.NodeStatus, c corev1.NodeCondition, now metav1.Time) {
	c.LastHeartbeatTime = now
	c.LastTransitionTime = now
	for i := range st.Conditions {
		if st.Conditions[i].Type != c.Type {
			continue
		}
		if st.Conditions[i].Status == c.Status {
			c.LastTransitionTime = st.Conditions[i].LastTransitionTime
		}
		st.Conditions[i] = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}

// renewLease renews the node's Lease, creating it when missing. It updates the Lease it
// wrote last and reads it again only when that fails, as the kubelet does.
func (n *Node) renewLease(ctx context.Context) error {
	leases := n.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	if n.lease != nil {
		lease := n.lease.DeepCopy()
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		if updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err == nil {
			n.lease = updated
			return nil
		}
		n.lease = nil
	}
	lease, err := leases.Get(ctx, n.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease, err = leases.Create(ctx, n.newLease(), metav1.CreateOptions{})
		if err == nil {
			n.lease = lease
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("renewing lease of node %s: %w", n.opts.Name, err)
	}
	lease = lease.DeepCopy()
	lease.Spec = n.newLease().Spec
	if lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renewing lease of node %s: %w", n.opts.Name, err)
	}
	n.lease = lease
	return nil
}

// leaseDurationSeconds is the Lease duration of a kubelet that renews every renew: four of its
// intervals (it renews every quarter of nodeLeaseDurationSeconds), in whole seconds, at least
// one. The controller reads the interval from it (lease.RenewInterval) and judges the Lease
// with two intervals at the least: a Lease renewed every second that said the kubelet's default
// 40 would be judged with 20 s whatever the policy's leaseTimeout.
func leaseDurationSeconds(renew time.Duration) int32 {
	return int32(max((4*renew+time.Second-1)/time.Second, 1))
}

func (n *Node) newLease() *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      n.opts.Name,
			Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: n.opts.Name, UID: n.nodeUID,
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(n.opts.Name),
			LeaseDurationSeconds: ptr.To(leaseDurationSeconds(n.opts.LeaseRenewInterval)),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
}
