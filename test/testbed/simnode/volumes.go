package simnode

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// attachRecheck is how often a pod waiting for its volumes is checked again besides the
// changes of the node's VolumeAttachments (its claim may get bound meanwhile, for instance).
const attachRecheck = 2 * time.Second

// startAttachmentInformer watches the VolumeAttachments (all of them: there is no field
// selector on spec.nodeName) and requeues the node's pods when one of its own changes.
func (n *Node) startAttachmentInformer(ctx context.Context) error {
	n.vaFactory = informers.NewSharedInformerFactory(n.kube, 0)
	n.attachments = n.vaFactory.Storage().V1().VolumeAttachments().Informer()
	changed := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.NodeName == n.opts.Name {
			n.requeueAllPods()
		}
	}
	if _, err := n.attachments.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: changed,
	}); err != nil {
		return fmt.Errorf("watching volume attachments of node %s: %w", n.opts.Name, err)
	}
	n.vaFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), n.attachments.HasSynced) {
		return fmt.Errorf("watching volume attachments of node %s: %w", n.opts.Name, context.Cause(ctx))
	}
	return nil
}

// volumesReady does the kubelet's wait-for-attach: it reports whether every persistent volume
// of pod that the attach-detach controller attaches (a CSI volume whose driver requires
// attachment) has a VolumeAttachment on this node with status.attached. When not, it says
// what the pod waits for.
func (n *Node) volumesReady(ctx context.Context, pod *corev1.Pod) (bool, string, error) {
	for _, v := range pod.Spec.Volumes {
		var claim string
		switch {
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			claim = pod.Name + "-" + v.Name // the claim of a generic ephemeral volume
		default:
			continue
		}
		pv, waitFor, err := n.claimedVolume(ctx, pod.Namespace, claim)
		if err != nil || waitFor != "" {
			return false, waitFor, err
		}
		needed, err := n.needsAttach(ctx, pv)
		if err != nil {
			return false, "", err
		}
		if needed && !n.attached(pv.Name) {
			return false, fmt.Sprintf("volume %s to be attached", pv.Name), nil
		}
	}
	return true, "", nil
}

// claimedVolume returns the PersistentVolume bound to the claim, or what the pod waits for.
func (n *Node) claimedVolume(ctx context.Context, ns, claim string) (*corev1.PersistentVolume, string, error) {
	pvc, err := n.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("claim %s to exist", claim), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("getting claim %s: %w", claim, err)
	}
	if pvc.Spec.VolumeName == "" {
		return nil, fmt.Sprintf("claim %s to be bound", claim), nil
	}
	pv, err := n.kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("volume %s to exist", pvc.Spec.VolumeName), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("getting volume %s: %w", pvc.Spec.VolumeName, err)
	}
	return pv, "", nil
}

// needsAttach reports whether pv is a CSI volume whose driver requires attachment: no
// CSIDriver object, or one with attachRequired (the attach-detach controller's rule).
func (n *Node) needsAttach(ctx context.Context, pv *corev1.PersistentVolume) (bool, error) {
	if pv.Spec.CSI == nil {
		return false, nil
	}
	d, err := n.kube.StorageV1().CSIDrivers().Get(ctx, pv.Spec.CSI.Driver, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting CSIDriver %s: %w", pv.Spec.CSI.Driver, err)
	}
	return d.Spec.AttachRequired == nil || *d.Spec.AttachRequired, nil
}

// attached reports whether a VolumeAttachment of pv to this node says attached.
func (n *Node) attached(pv string) bool {
	for _, obj := range n.attachments.GetStore().List() {
		va := obj.(*storagev1.VolumeAttachment)
		src := va.Spec.Source.PersistentVolumeName
		if va.Spec.NodeName == n.opts.Name && src != nil && *src == pv && va.Status.Attached {
			return true
		}
	}
	return false
}

// syncCSINode makes the node's CSINode list Options.CSIDrivers with the node's name as their
// node ID, as the kubelet does when the drivers' node plugins register; the external-attacher
// reads the node ID from it. Done once per Node object (the CSINode is owned by it).
func (n *Node) syncCSINode(ctx context.Context) error {
	if len(n.opts.CSIDrivers) == 0 || n.csiNodeOf == n.nodeUID {
		return nil
	}
	want := n.newCSINode()
	csiNodes := n.kube.StorageV1().CSINodes()
	cur, err := csiNodes.Get(ctx, n.opts.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = csiNodes.Create(ctx, want, metav1.CreateOptions{})
	case err == nil && !sameCSINode(cur, want):
		cur = cur.DeepCopy()
		cur.Spec, cur.OwnerReferences = want.Spec, want.OwnerReferences
		_, err = csiNodes.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("registering CSI drivers of node %s: %w", n.opts.Name, err)
	}
	n.csiNodeOf = n.nodeUID
	n.logf("registered CSI drivers %v", n.opts.CSIDrivers)
	return nil
}

func (n *Node) newCSINode() *storagev1.CSINode {
	cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{
		Name:            n.opts.Name,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.opts.Name, UID: n.nodeUID}},
	}}
	for _, d := range n.opts.CSIDrivers {
		cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: n.opts.Name})
	}
	return cn
}

// sameCSINode compares the drivers' names and node IDs and the owner.
func sameCSINode(a, b *storagev1.CSINode) bool {
	key := func(d storagev1.CSINodeDriver) string { return d.Name + "\x00" + d.NodeID }
	owner := func(cn *storagev1.CSINode) string {
		if len(cn.OwnerReferences) != 1 {
			return ""
		}
		return string(cn.OwnerReferences[0].UID)
	}
	return owner(a) == owner(b) && slices.EqualFunc(a.Spec.Drivers, b.Spec.Drivers,
		func(x, y storagev1.CSINodeDriver) bool { return key(x) == key(y) })
}
