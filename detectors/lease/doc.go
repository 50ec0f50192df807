// Package lease is the API server's view of a node: the renewTime of its Lease in
// kube-node-lease (renewed by the kubelet every 10 s by default), falling back to the
// lastHeartbeatTime of its Ready condition when it has no Lease. It cannot tell a dead node from
// one cut off from the API server; other detectors can.
package lease
