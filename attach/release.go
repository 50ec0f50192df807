package attach

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	csitrans "k8s.io/csi-translation-lib"

	attachercontroller "github.com/kubernetes-csi/external-attacher/v4/pkg/controller"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// DefaultForceAfter is how long a deleted attachment's attacher must have reported a detach error
// (and the attachment waited since its deletion) before its finalizer is removed.
const DefaultForceAfter = 30 * time.Second

// Result says what one Release call found and did.
type Result struct {
	// Deleted counts the attachments deleted by this call.
	Deleted int
	// Forced names the attachments whose attacher finalizer this call removed, the attacher
	// having reported a detach error for ForceAfter ("attachment (volume)"): their
	// ControllerUnpublishVolume never succeeded, so the storage system may still publish the
	// volume to the node.
	Forced []string
	// Remaining names the node's attachments that still exist.
	Remaining []string
	// Kept names the node's attachments left alone because a pod that stays on the node (one
	// tolerating the out-of-service taint, or created after the fence's confirmation) uses their
	// volume ("attachment (volume, used by namespace/pod)"); they are not in Remaining.
	Kept []string
	// InUse names, alike, the node's attachments not deleted yet because a pod that is to go
	// still uses their volume (not ended, and not tolerating the taint: with the policy's
	// deletePods off, Kubernetes' own eviction deletes it); not in Remaining either.
	InUse []string
	// HeldByOthers names the node's attachments deleted and let go by their attacher (its
	// finalizer gone: it detached, or Palisade removed it from a stuck one) that other
	// finalizers keep ("attachment (finalizers)"): released as far as the fence goes, their
	// objects another controller's business; not in Remaining.
	HeldByOthers []string
}

// Releaser deletes a node's VolumeAttachments. Reader should read from the API server, not a
// cache: attachments are listed only when a node is released.
type Releaser struct {
	Reader     client.Reader
	Writer     client.Writer
	ForceAfter time.Duration
	Now        func() time.Time

	mu sync.Mutex
	// failing is when this Releaser first saw each deleted attachment's detach error, by UID.
	// The attachment's status keeps only its latest error's time, so how long the attacher has
	// been failing is counted from here; a Releaser started anew (a new leader) counts afresh.
	failing map[types.UID]time.Time
}

// Release makes one pass over the node's attachments; it is idempotent and done when
// Result.Remaining is empty. A stuck attacher's finalizer is removed only when force is not nil,
// which says the node can no longer write to its volumes (its machine is off, or the storage
// refuses it), and only after force, given the attachments about to be freed ("attachment
// (volume)", as Result.Forced names them), returned nil: the caller records them first, so that
// a caller killed between the removal and its record of it leaves a record that says so rather
// than nothing (an error from force frees none). A node that runs (its workload stopped by the
// Executor) still has the volumes mounted, and its kernel may still write the killed processes'
// dirty pages: skipping the attacher's ControllerUnpublishVolume would let the replacement's
// node mount a volume that node still writes, so its attachments wait for the attacher,
// however long.
//
// An attachment whose volume a pod still on the node uses is not deleted, as Kubernetes'
// attach-detach controller keeps a volume attached while a pod on its node uses it: deleting it
// would have the attacher unpublish the volume under that pod, which may run. A pod tolerating
// the out-of-service taint stays (Result.Kept), and so does one created after stayAfter (the
// fence's confirmation: not a pod the fence found there, such as a replacement scheduled onto
// a node left running); any other is to go, and its attachments wait for it (Result.InUse). An
// attachment already being deleted goes as any other. An attachment of an inline volume (an
// in-tree one migrated to CSI, no PersistentVolume) is matched to the pods' inline volumes by
// the CSI driver and handle their migration gives them (volumeUse).
func (r *Releaser) Release(ctx context.Context, node string, force func(freeing []string) error, stayAfter time.Time) (Result, error) {
	var list storagev1.VolumeAttachmentList
	if err := r.Reader.List(ctx, &list); err != nil {
		return Result{}, fmt.Errorf("listing volume attachments: %w", err)
	}
	r.prune(list.Items)
	var res Result
	var stuck []*storagev1.VolumeAttachment
	err := r.releasing(ctx, list.Items, node, stayAfter, &res, func(va *storagev1.VolumeAttachment) error {
		gone, attacherStuck, err := r.releaseOne(ctx, va, &res)
		switch {
		case err != nil, gone:
		case attacherStuck && force != nil:
			stuck = append(stuck, va)
		default:
			res.Remaining = append(res.Remaining, va.Name)
		}
		return err
	})
	if err == nil && len(stuck) > 0 {
		freeing := make([]string, len(stuck))
		for i, va := range stuck {
			freeing[i] = named(va)
		}
		if err = force(freeing); err != nil {
			err = fmt.Errorf("recording the attachments about to be freed from their attacher: %w", err)
		}
	}
	if err != nil || len(stuck) == 0 { // none is freed
		for _, va := range stuck {
			res.Remaining = append(res.Remaining, va.Name)
		}
		return res, err
	}
	var errs []error
	for _, va := range stuck {
		gone, err := r.free(ctx, va, &res)
		if err != nil {
			errs = append(errs, err)
		}
		if !gone {
			res.Remaining = append(res.Remaining, va.Name)
		}
	}
	return res, errors.Join(errs...)
}

// Volume is the volume of one of a node's attachments.
type Volume struct {
	// Attachment is the VolumeAttachment's name.
	Attachment string
	// Driver and Handle name the volume as its PersistentVolume (or the attachment's inline
	// spec) does: a CSI volume's driver and volumeHandle, an in-tree volume's as its migration
	// to CSI translates them (an awsElasticBlockStore's: ebs.csi.aws.com and its vol-… ID).
	// Both are "" for an in-tree kind without a migration, and when the PersistentVolume is
	// gone.
	Driver, Handle string
}

// Releasing names the volumes of the node's attachments that a Release now would let go: every
// attachment of the node but those kept for a pod that stays (Result.Kept) and those waiting for
// a pod still to go (returned in inUse, as Result.InUse). A release step that acts on the
// volumes themselves (a cloud's force detach) acts on these and on no other: not on a volume a
// pod left on the node uses, nor on one the node has without an attachment (its root or its
// own data volume).
func (r *Releaser) Releasing(ctx context.Context, node string, stayAfter time.Time) (vols []Volume, inUse []string, err error) {
	var list storagev1.VolumeAttachmentList
	if err := r.Reader.List(ctx, &list); err != nil {
		return nil, nil, fmt.Errorf("listing volume attachments: %w", err)
	}
	var res Result
	err = r.releasing(ctx, list.Items, node, stayAfter, &res, func(va *storagev1.VolumeAttachment) error {
		v, err := r.volumeOf(ctx, va)
		if err == nil {
			vols = append(vols, v)
		}
		return err
	})
	return vols, res.InUse, err
}

// releasing calls release for every attachment in list of node that a release lets go, and
// names in res.Kept and res.InUse those it leaves alone: an attachment whose volume a pod still
// on the node uses, as Release says.
func (r *Releaser) releasing(ctx context.Context, list []storagev1.VolumeAttachment, node string, stayAfter time.Time, res *Result, release func(*storagev1.VolumeAttachment) error) error {
	var inUse *volumeUse // read once, when the node has an attachment
	for i := range list {
		va := &list[i]
		if va.Spec.NodeName != node {
			continue
		}
		if inUse == nil {
			var err error
			if inUse, err = r.volumesInUse(ctx, node, stayAfter); err != nil {
				return err
			}
		}
		if u, vol, used := inUse.of(va); used {
			named := fmt.Sprintf("%s (%s, used by %s)", va.Name, vol, u.pod)
			if u.stays {
				res.Kept = append(res.Kept, named)
			} else {
				res.InUse = append(res.InUse, named)
			}
			continue
		}
		if err := release(va); err != nil {
			return err
		}
	}
	return nil
}

// named is "attachment (volume)", or the attachment's name alone when it names no volume.
func named(va *storagev1.VolumeAttachment) string {
	if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
		return fmt.Sprintf("%s (%s)", va.Name, *pv)
	}
	if key := inlineKey(va.Spec.Source.InlineVolumeSpec); key != "" {
		return fmt.Sprintf("%s (inline %s)", va.Name, key)
	}
	return va.Name
}

// volumeUse is the volumes the pods on a node use, each with one such pod (one that stays, if
// any does): persistent volumes by name, and inline volumes of in-tree plugins by the CSI
// driver and handle their migration gives them (inlineKey), as the attachments of such volumes
// name them.
type volumeUse struct {
	byPV, byInline map[string]podUse
}

// of says whether a pod uses va's volume, and names the volume; an attachment already being
// deleted is not in use (it goes as any other).
func (u *volumeUse) of(va *storagev1.VolumeAttachment) (podUse, string, bool) {
	if va.DeletionTimestamp != nil {
		return podUse{}, "", false
	}
	if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
		p, used := u.byPV[*pv]
		return p, *pv, used
	}
	if key := inlineKey(va.Spec.Source.InlineVolumeSpec); key != "" {
		p, used := u.byInline[key]
		return p, "inline " + key, used
	}
	return podUse{}, "", false
}

// add records that pod p uses the volume named key in m, unless a pod that stays already does.
func (p podUse) add(m map[string]podUse, key string) {
	if key != "" && !m[key].stays {
		m[key] = p
	}
}

// translator translates in-tree volumes to the CSI ones their migration makes them, as the
// attach-detach controller and the CSI attacher do.
var translator = csitrans.New()

// inlineKey names an attachment's inline volume spec by CSI driver and handle ("driver^handle",
// as Kubernetes names CSI volumes); an in-tree spec is translated first. "" when it has none.
func inlineKey(spec *corev1.PersistentVolumeSpec) string {
	if spec == nil {
		return ""
	}
	if spec.CSI == nil {
		pv, err := translator.TranslateInTreePVToCSI(klog.Background(), &corev1.PersistentVolume{Spec: *spec})
		if err != nil || pv.Spec.CSI == nil {
			return ""
		}
		spec = &pv.Spec
	}
	return spec.CSI.Driver + "^" + spec.CSI.VolumeHandle
}

// podInlineKey is inlineKey of a pod's inline in-tree volume as its migration translates it;
// "" for another kind of volume (a claim, a CSI ephemeral volume, which has no attachment).
func podInlineKey(v *corev1.Volume, namespace string) string {
	if !translator.IsInlineMigratable(v) {
		return ""
	}
	pv, err := translator.TranslateInTreeInlineVolumeToCSI(klog.Background(), v, namespace)
	if err != nil {
		return ""
	}
	return inlineKey(&pv.Spec)
}

// volumeOf reads the volume of va from its PersistentVolume, or from its inline spec.
func (r *Releaser) volumeOf(ctx context.Context, va *storagev1.VolumeAttachment) (Volume, error) {
	v := Volume{Attachment: va.Name}
	spec := va.Spec.Source.InlineVolumeSpec
	if name := va.Spec.Source.PersistentVolumeName; name != nil {
		pv := &corev1.PersistentVolume{}
		if err := r.Reader.Get(ctx, client.ObjectKey{Name: *name}, pv); err != nil {
			if apierrors.IsNotFound(err) {
				return v, nil
			}
			return v, fmt.Errorf("reading persistent volume %s of volume attachment %s: %w", *name, va.Name, err)
		}
		spec = &pv.Spec
	}
	if key := inlineKey(spec); key != "" {
		v.Driver, v.Handle, _ = strings.Cut(key, "^")
	}
	return v, nil
}

// podUse is a pod that uses a volume: its namespace/name, and whether it stays on the fenced
// node (it tolerates the out-of-service taint, or came after the fence's confirmation).
type podUse struct {
	pod   string
	stays bool
}

// volumesInUse names the volumes that the pods on node use, each with one such pod (one that
// stays, if any does), as the attach-detach controller counts them: every pod bound to the node
// that has not ended (Succeeded or Failed, or deleted with none of its containers running; a
// pod a fence force-deleted is marked Failed or is gone), through its claims, its generic
// ephemeral volumes' claims (those the pod owns) and its inline in-tree volumes (migrated to
// CSI: their attachments carry the translated spec).
func (r *Releaser) volumesInUse(ctx context.Context, node string, stayAfter time.Time) (*volumeUse, error) {
	inUse := &volumeUse{byPV: map[string]podUse{}, byInline: map[string]podUse{}}
	var pods corev1.PodList
	if err := r.Reader.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", node)}); err != nil {
		return nil, fmt.Errorf("listing the pods on node %s: %w", node, err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if ended(pod) {
			continue
		}
		stays := v1alpha1.ToleratesOutOfService(pod.Spec.Tolerations) || !stayAfter.IsZero() && pod.CreationTimestamp.After(stayAfter)
		use := podUse{pod: pod.Namespace + "/" + pod.Name, stays: stays}
		for j := range pod.Spec.Volumes {
			v := &pod.Spec.Volumes[j]
			var claim string
			switch {
			case v.PersistentVolumeClaim != nil:
				claim = v.PersistentVolumeClaim.ClaimName
			case v.Ephemeral != nil:
				claim = pod.Name + "-" + v.Name // the ephemeral volume controller's name for it
			default:
				use.add(inUse.byInline, podInlineKey(v, pod.Namespace))
				continue
			}
			pvc := &corev1.PersistentVolumeClaim{}
			if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: claim}, pvc); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("reading claim %s/%s of pod %s on node %s: %w", pod.Namespace, claim, pod.Name, node, err)
			}
			if v.Ephemeral != nil && !metav1.IsControlledBy(pvc, pod) {
				continue // a claim of that name made for another pod
			}
			use.add(inUse.byPV, pvc.Spec.VolumeName)
		}
	}
	return inUse, nil
}

// ended says whether pod no longer uses its volumes, as the attach-detach controller judges it:
// Succeeded or Failed, or deleted with none of its containers running.
func ended(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	if pod.DeletionTimestamp == nil {
		return false
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, c := range statuses {
			if c.State.Running != nil {
				return false
			}
		}
	}
	return true
}

// releaseOne deletes va; it reports whether va is gone, as far as the fence goes, and whether
// its attacher is stuck (attacherStuck: its finalizer is removed apart, free).
func (r *Releaser) releaseOne(ctx context.Context, va *storagev1.VolumeAttachment, res *Result) (gone, stuck bool, err error) {
	if va.DeletionTimestamp == nil {
		if err := r.Writer.Delete(ctx, va, client.Preconditions{UID: &va.UID}); err != nil {
			if apierrors.IsNotFound(err) {
				return true, false, nil
			}
			return false, false, fmt.Errorf("deleting volume attachment %s: %w", va.Name, err)
		}
		res.Deleted++
		return len(va.Finalizers) == 0, false, nil
	}
	finalizer := attachercontroller.GetFinalizerName(va.Spec.Attacher)
	if !slices.Contains(va.Finalizers, finalizer) {
		if len(va.Finalizers) == 0 {
			return true, false, nil // its deletion goes through
		}
		// The attacher let go of it (it detached, or was freed as stuck on an earlier pass);
		// what keeps the object is someone else's, and waiting for it would never end.
		res.HeldByOthers = append(res.HeldByOthers, fmt.Sprintf("%s (%s)", va.Name, strings.Join(va.Finalizers, ", ")))
		return true, false, nil
	}
	return false, r.attacherStuck(va), nil
}

// free removes the attacher's finalizer from va, being deleted and its attacher stuck; it
// reports whether va is gone.
func (r *Releaser) free(ctx context.Context, va *storagev1.VolumeAttachment, res *Result) (bool, error) {
	finalizer := attachercontroller.GetFinalizerName(va.Spec.Attacher)
	patch := client.MergeFromWithOptions(va.DeepCopy(), client.MergeFromWithOptimisticLock{})
	va.Finalizers = slices.DeleteFunc(va.Finalizers, func(f string) bool { return f == finalizer })
	if err := r.Writer.Patch(ctx, va, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("removing finalizer %s from volume attachment %s: %w", finalizer, va.Name, err)
	}
	res.Forced = append(res.Forced, named(va))
	return len(va.Finalizers) == 0, nil
}

// attacherStuck says whether the attacher has said, for ForceAfter, that it cannot detach va:
// its detach error has been seen on every pass for ForceAfter, and va has waited as long since
// its deletion (time for the attacher's own retries to clear a passing error). An attacher that
// has not acted — down, restarting, or behind its work queue's back-off after an API server
// outage — is waited for, however long; so is one whose first attempt after such an outage
// failed once. Removing its finalizer would skip its ControllerUnpublishVolume and leave the
// volume published to the fenced node in the storage backend, which then refuses a single-node
// volume to the replacement's node for good. And the replacement's attach needs that attacher
// anyway.
func (r *Releaser) attacherStuck(va *storagev1.VolumeAttachment) bool {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	t := now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if va.Status.DetachError == nil {
		delete(r.failing, va.UID) // the error must last: one cleared starts the count again
		return false
	}
	if r.failing == nil {
		r.failing = map[types.UID]time.Time{}
	}
	since, seen := r.failing[va.UID]
	if !seen {
		since = t
		r.failing[va.UID] = t
	}
	return t.Sub(since) >= r.Force() && t.Sub(va.DeletionTimestamp.Time) >= r.Force()
}

// prune forgets the attachments that are gone: list is every attachment of the cluster.
func (r *Releaser) prune(list []storagev1.VolumeAttachment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failing) == 0 {
		return // the common pass: no detach error remembered, no set of UIDs to build
	}
	present := make(map[types.UID]bool, len(list))
	for i := range list {
		present[list[i].UID] = true
	}
	for uid := range r.failing {
		if !present[uid] {
			delete(r.failing, uid)
		}
	}
}

// Force is how long an attacher's detach error must stand before the attachment's finalizer is
// removed: ForceAfter, or DefaultForceAfter when that is zero.
func (r *Releaser) Force() time.Duration {
	if r.ForceAfter == 0 {
		return DefaultForceAfter
	}
	return r.ForceAfter
}
