package app

import (
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// trimNode is the cache's transform of a Node: it drops what the controller never reads and a
// kubelet's Node carries most of — the images it holds (up to the kubelet's nodeStatusMaxImages,
// 50, each with its names and digests: most of a Node's size), its capacity and allocatable, its
// volumes in use and attached, its daemon endpoints, configuration, runtime handlers and
// features — and managedFields, as every other cached object. What fencing reads stays: the
// metadata (labels for policies, annotations for requests, finalizers), the whole spec (taints,
// providerID), and the status's phase, conditions, addresses and nodeInfo (the boot ID).
//
// The controller never writes a Node from this cache but by a merge patch against the cached
// copy (a diff: a field dropped from both sides is not in it), and never updates a Node, so
// nothing dropped here is ever written back empty. Code that comes to read another field of a
// cached Node's status keeps it here (TestTrimNodeKeepsWhatFencingReads lists what is kept).
func trimNode(obj any) (any, error) {
	obj, err := cache.TransformStripManagedFields()(obj)
	if err != nil {
		return obj, err
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	kept := corev1.NodeStatus{Phase: n.Status.Phase, Conditions: n.Status.Conditions, Addresses: n.Status.Addresses, NodeInfo: n.Status.NodeInfo}
	n.Status = kept
	return n, nil
}

var _ toolscache.TransformFunc = trimNode
