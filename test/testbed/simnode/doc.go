// Package simnode simulates a node for tests, since no kubelet can run here: it does the
// kubelet's part of the API traffic, as kwok does. It registers the Node (capacity, Ready and
// pressure conditions, addresses, nodeInfo with a boot ID) and its CSINode (the CSI drivers of
// Options.CSIDrivers, node ID = node name), keeps its Lease in kube-node-lease renewed and its
// Ready condition fresh, marks the pods bound to it Running and Ready — a pod with a persistent
// volume that must be attached (a CSI volume whose driver requires attachment) only once a
// VolumeAttachment of that volume to the node says attached, as the kubelet waits for it — and
// confirms the termination of its pods that are being deleted. Its life is tied to a
// PowerSource (an ipmi_sim BMC in the test bed): when the power goes off the node does nothing
// at all, like a dead machine; when it comes back the node reboots with a new boot ID and
// resumes. PauseHeartbeats simulates a network partition instead: the node keeps "running" but
// no request of it reaches the API server. With Options.ExternalLease the Lease and the Ready
// heartbeat belong to another process (simkubelet, in the node's network namespace), so that
// a test can kill that "kubelet" or cut its network while the node's pods keep running.
package simnode
