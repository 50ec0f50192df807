package app

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// palisadeAnnotations is the prefix of every Node annotation the controller reads (fence and
// unfence requests, BMC addresses and Secrets, storage CIDRs: config/v1alpha1/names.go).
const palisadeAnnotations = "palisade.dev/"

// trimNode is the cache's transform of a Node: it keeps what fencing reads of it and drops the
// rest, which on a kubelet's Node is most of its size — the images it holds (up to the kubelet's
// nodeStatusMaxImages, 50, each with its names and digests), its capacity and allocatable, its
// volumes in use and attached, its daemon endpoints, the conditions other than Ready, the system
// info other than the boot ID and system UUID, the annotations of others (a cloud provider's, a
// CSI driver's) — and managedFields, as every other cached object. What stays: the labels (any of
// them may select a policy's nodes), the annotations under palisade.dev/, the finalizers and the
// rest of the metadata, the whole spec (taints, providerID), and the status's phase, its Ready
// condition, its addresses (storage fences' CIDRs) and the boot ID and system UUID.
//
// The controller never writes a Node from this cache but by a patch against the cached copy (a
// merge patch is a diff: a field or map key dropped from both sides is not in it), and never
// updates a Node, so nothing dropped here is ever written back empty; what needs managedFields
// reads the Node from the API server (readyPostedAfter). Code that comes to read another field
// of a cached Node keeps it here (TestTrimNodeKeepsWhatFencingReads says what is kept).
func trimNode(obj any) (any, error) {
	obj, err := cache.TransformStripManagedFields()(obj)
	if err != nil {
		return obj, err
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	var annotations map[string]string
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, palisadeAnnotations) {
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[k] = v
		}
	}
	n.Annotations = annotations
	kept := corev1.NodeStatus{Phase: n.Status.Phase, Addresses: n.Status.Addresses,
		NodeInfo: corev1.NodeSystemInfo{BootID: n.Status.NodeInfo.BootID, SystemUUID: n.Status.NodeInfo.SystemUUID}}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			kept.Conditions = []corev1.NodeCondition{c}
		}
	}
	n.Status = kept
	return n, nil
}

var _ toolscache.TransformFunc = trimNode
