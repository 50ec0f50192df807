package fencing

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	attachercontroller "github.com/kubernetes-csi/external-attacher/v4/pkg/controller"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/fake"
)

// cloud is a power provider that also releases volumes: each ReleaseVolumes answers the next
// of answers (the last one again once they run out).
type cloud struct {
	*fake.Provider
	answers []providers.Status
	errs    []error
	calls   int
	// volumes is what the last call was handed.
	volumes []providers.Volume
}

func (c *cloud) ReleaseVolumes(_ context.Context, req providers.Request) (providers.Status, error) {
	i := min(c.calls, len(c.answers)-1)
	c.calls++
	c.volumes = req.Volumes
	var err error
	if i < len(c.errs) {
		err = c.errs[i]
	}
	return c.answers[i], err
}

// awsWorld is a world whose method "cloud" is of type AWS, with forceDetachVolumes as given,
// served by c.
func awsWorld(t *testing.T, force bool, c *cloud) *world {
	t.Helper()
	w := newWorld(t, "cloud")
	nf := &v1alpha1.NodeFence{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	nf.Spec.Methods[0] = v1alpha1.Method{Name: "cloud", Type: v1alpha1.MethodAWS, Timeout: nf.Spec.Methods[0].Timeout,
		AWS: &v1alpha1.AWSMethod{ForceDetachVolumes: force}}
	if err := w.c.Update(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	c.Provider = w.power
	w.r.Fencers[v1alpha1.MethodAWS] = c
	return w
}

// TestDetachVolumesStep: with forceDetachVolumes, the confirmed AWS fence force-detaches the
// instance's volumes after the pods are deleted and before the attachments are released, and
// goes on only once the provider reads them detached; an error keeps the step pending, saying
// why, and never fails a fence whose pods are already deleted. Without it, there is no such step.
func TestDetachVolumesStep(t *testing.T) {
	detaching := providers.Status{State: providers.InProgress, Reason: "VolumesDetaching", Message: "waiting for EBS volumes vol-1 to detach"}
	denied := providers.NewError(providers.ReasonCloudAuthFailed, errors.New("UnauthorizedOperation: ec2:DetachVolume"))
	for _, tc := range []struct {
		name  string
		force bool
		c     *cloud
	}{
		{"detach-volumes", true, &cloud{answers: []providers.Status{detaching, detaching, {State: providers.Confirmed, Message: "no EBS volume is attached"}}}},
		{"detach-volumes-denied-then-allowed", true, &cloud{answers: []providers.Status{{}, detaching, {State: providers.Confirmed}}, errs: []error{denied}}},
		{"no-detach-volumes", false, &cloud{answers: []providers.Status{{State: providers.Confirmed}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := awsWorld(t, tc.force, tc.c)
			sawDenied := false
			w.tick = func(nf *v1alpha1.NodeFence) {
				for _, s := range nf.Status.Steps {
					sawDenied = sawDenied || s.Name == v1alpha1.StepDetachVolumes && s.Reason == string(providers.ReasonCloudAuthFailed)
				}
			}
			nf := w.run(t)
			checkGolden(t, tc.name, goldenTrace(nf))
			checkReleased(t, w, true)
			if tc.force != (tc.c.calls > 0) {
				t.Errorf("ReleaseVolumes called %d times with forceDetachVolumes %v", tc.c.calls, tc.force)
			}
			if tc.c.errs != nil && !sawDenied {
				t.Error("the refused detach was not recorded on the step")
			}
		})
	}
}

// TestDetachVolumesOnlyOfTheAttachmentsReleased: the DetachVolumes step hands the provider the
// volumes of the node's attachments the release lets go, and not the volume of a pod that stays
// on the node (tolerating the out-of-service taint); while a pod that is to go still uses a
// volume (the policy's deletePods off: Kubernetes' eviction deletes it), the step waits for it
// and detaches nothing.
func TestDetachVolumesOnlyOfTheAttachmentsReleased(t *testing.T) {
	c := &cloud{answers: []providers.Status{{State: providers.Confirmed, Message: "detached"}}}
	w := awsWorld(t, true, c)
	ctx := context.Background()
	pod := giveDBVolume(t, w, func(r *v1alpha1.Release) { r.DeletePods = ptr.To(false) })
	ebs := func(pv, handle string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: handle}}}}
	}
	for _, o := range append(backupPod(), ebs("pv-db-0", "vol-0db0"), ebs("pv-backup", "vol-0bac")) {
		if err := w.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	w.ticks = 20
	got, ended := w.advance(t)
	last := got.Status.Steps[len(got.Status.Steps)-1]
	if ended || last.Name != v1alpha1.StepDetachVolumes || !strings.Contains(last.Message, "va-db-0 (pv-db-0, used by db/db-0)") || c.calls > 0 {
		t.Fatalf("with db-0 still on the node: phase %s, last step %s %s: %s, %d detach calls; want DetachVolumes waiting for db-0, nothing detached",
			got.Status.Phase, last.Name, last.State, last.Message, c.calls)
	}
	if err := w.c.Delete(ctx, pod); err != nil { // Kubernetes' eviction and PodGC
		t.Fatal(err)
	}
	if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("phase %s once db-0 is gone, want Released\n%s", nf.Status.Phase, goldenTrace(nf))
	}
	want := []providers.Volume{{Attachment: "va-db-0", Driver: "ebs.csi.aws.com", Handle: "vol-0db0"}, {Attachment: "va1"}}
	if diff := cmp.Diff(want, c.volumes); diff != "" {
		t.Errorf("volumes handed to the provider (-want +got):\n%s", diff)
	}
}

// The attachments of a node the Executor fenced (left running, its volumes still mounted) wait
// for their attacher, however long it reports a detach error: its finalizer is never removed,
// which would skip the unpublish while the node's kernel may still write. A power fence's node
// is off: there the finalizer goes after the attacher failed for ForceAfter, and the fence says
// so where an operator looks (a Warning event, the step's message, status.attachmentsForced):
// the volume was never unpublished, and the storage system may still publish it to the node.
func TestStuckAttacherOfARunningNode(t *testing.T) {
	for _, tt := range []struct {
		method   string
		released bool
	}{{"executor", false}, {"ipmi", true}} {
		t.Run(tt.method, func(t *testing.T) {
			w := newWorld(t, tt.method)
			// The attachment's deletionTimestamp is the fake API server's wall clock: the
			// Releaser's clock is that, moved on by the simulated time.
			real, start := time.Now(), w.now
			w.r.Attachments.Now = func() time.Time { return real.Add(w.now.Sub(start)) }
			ctx := context.Background()
			va := attacherHolds(t, w)
			rec := &recorder{}
			w.r.Recorder = rec
			w.ticks = 120
			w.tick = attacherFails(t, w, va)
			nf, _ := w.advance(t)
			if released := nf.Status.Phase == v1alpha1.PhaseReleased; released != tt.released {
				t.Errorf("phase %s after 2 min of detach errors, want released %v\n%s", nf.Status.Phase, tt.released, goldenTrace(nf))
			}
			err := w.c.Get(ctx, client.ObjectKey{Name: "va1"}, va)
			if kept := err == nil && len(va.Finalizers) == 1; kept == tt.released {
				t.Errorf("attacher's finalizer kept %v (%v), want %v", kept, err, !tt.released)
			}
			said := rec.said(ReasonAttachmentsForced)
			msg := stepOf(nf, v1alpha1.StepReleaseAttachments).Message
			if !tt.released {
				if len(said) > 0 || len(nf.Status.AttachmentsForced) > 0 {
					t.Errorf("nothing forced, yet events %q and status.attachmentsForced %q", said, nf.Status.AttachmentsForced)
				}
				return
			}
			if diff := cmp.Diff([]string{"va1"}, nf.Status.AttachmentsForced); diff != "" {
				t.Errorf("status.attachmentsForced (-want +got):\n%s", diff)
			}
			if len(said) != 1 || !strings.Contains(said[0], "ControllerUnpublishVolume never succeeded") || !strings.Contains(said[0], ": va1") {
				t.Errorf("%s events %q: want one naming va1 and saying it was never unpublished", ReasonAttachmentsForced, said)
			}
			if !strings.Contains(msg, "without a detach") || !strings.Contains(msg, "va1") {
				t.Errorf("ReleaseAttachments says %q: want it to name va1 as freed without a detach", msg)
			}
		})
	}
}

// status.attachmentsForced names an attachment before its attacher's finalizer is removed: a
// controller killed between the two (here the removal is refused once, as a controller gone
// never makes it) leaves a record that says the volume may still be published to the node.
// The fence then frees it and names it once.
func TestForcedRecordedBeforeFreed(t *testing.T) {
	w := newWorld(t, "ipmi")
	real, start := time.Now(), w.now
	w.r.Attachments.Now = func() time.Time { return real.Add(w.now.Sub(start)) }
	va := attacherHolds(t, w)
	gate := &removalGate{Writer: w.c, c: w.c, t: t}
	w.r.Attachments.Writer = gate
	w.ticks = 120
	w.tick = attacherFails(t, w, va)
	nf, _ := w.advance(t)
	if nf.Status.Phase != v1alpha1.PhaseReleased || gate.refused != 1 || gate.removed != 1 {
		t.Errorf("phase %s, finalizer removals refused %d and made %d; want Released after one of each\n%s", nf.Status.Phase, gate.refused, gate.removed, goldenTrace(nf))
	}
	if diff := cmp.Diff([]string{"va1"}, nf.Status.AttachmentsForced); diff != "" {
		t.Errorf("status.attachmentsForced (-want +got):\n%s", diff)
	}
}

// attacherFails is a tick in which the attacher cannot detach va once it is deleted:
// ControllerUnpublishVolume fails on every try.
func attacherFails(t *testing.T, w *world, va *storagev1.VolumeAttachment) func(*v1alpha1.NodeFence) {
	return func(*v1alpha1.NodeFence) {
		ctx := context.Background()
		if err := w.c.Get(ctx, client.ObjectKey{Name: va.Name}, va); err == nil && va.DeletionTimestamp != nil && va.Status.DetachError == nil {
			va.Status.DetachError = &storagev1.VolumeError{Message: "volume in use on the node"}
			if err := w.c.Status().Update(ctx, va); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// removalGate checks, when the attacher's finalizer is removed from an attachment, that the
// NodeFence on the API server already names it in status.attachmentsForced, and refuses the
// first removal.
type removalGate struct {
	client.Writer
	c                client.Client
	t                *testing.T
	refused, removed int
}

func (g *removalGate) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if va, ok := obj.(*storagev1.VolumeAttachment); ok {
		var nfs v1alpha1.NodeFenceList
		if err := g.c.List(ctx, &nfs); err != nil || len(nfs.Items) != 1 || !slices.Contains(nfs.Items[0].Status.AttachmentsForced, va.Name) {
			g.t.Errorf("the attacher's finalizer of %s removed before the NodeFence's record names it (%v, %d NodeFences: %+v)", va.Name, err, len(nfs.Items), nfs.Items)
		}
		if g.refused == 0 {
			g.refused++
			return errors.New("connection reset: the controller is gone")
		}
		g.removed++
	}
	return g.Writer.Patch(ctx, obj, patch, opts...)
}

// A pod that tolerates the out-of-service taint is left on the fenced node (the Executor leaves
// the node running, and the pod with it), and so is its volume's attachment: deleting it would
// have the attacher unpublish the volume under a pod that may run. The node's other attachments
// are released, and the step says which it kept and why.
func TestAttachmentOfAPodLeftRunningIsKept(t *testing.T) {
	for _, method := range []string{"executor", "ipmi"} {
		t.Run(method, func(t *testing.T) {
			w := newWorld(t, method)
			ctx := context.Background()
			for _, o := range backupPod() {
				if err := w.c.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			nf := w.run(t)
			if nf.Status.Phase != v1alpha1.PhaseReleased {
				t.Fatalf("phase %s, want Released\n%s", nf.Status.Phase, goldenTrace(nf))
			}
			if err := w.c.Get(ctx, client.ObjectKey{Name: "va-backup"}, &storagev1.VolumeAttachment{}); err != nil {
				t.Errorf("the attachment of the pod left on the node: %v, want it kept", err)
			}
			if err := w.c.Get(ctx, client.ObjectKey{Name: "va1"}, &storagev1.VolumeAttachment{}); !apierrors.IsNotFound(err) {
				t.Errorf("the node's other attachment: %v, want it released", err)
			}
			if err := w.c.Get(ctx, client.ObjectKey{Namespace: "db", Name: "backup-0"}, &corev1.Pod{}); err != nil {
				t.Errorf("the pod tolerating the taint: %v, want it left alone", err)
			}
			var msg string
			for _, s := range nf.Status.Steps {
				if s.Name == v1alpha1.StepReleaseAttachments {
					msg = s.Message
				}
			}
			if !strings.Contains(msg, "kept 1 attachment") || !strings.Contains(msg, "va-backup (pv-backup, used by db/backup-0)") {
				t.Errorf("ReleaseAttachments says %q: want the attachment kept, and why", msg)
			}
		})
	}
}

// With the policy's deletePods off, the fence deletes no pod: Kubernetes' eviction does, once
// the out-of-service taint is on. Until the pod is gone its volume's attachment is not deleted
// (the attach-detach controller keeps it too): the step waits, naming it, and then releases it.
func TestAttachmentWaitsForThePodUsingIt(t *testing.T) {
	w, pod := withDBVolume(t, func(r *v1alpha1.Release) { r.DeletePods = ptr.To(false) })
	ctx := context.Background()
	w.ticks = 20
	got, ended := w.advance(t)
	last := got.Status.Steps[len(got.Status.Steps)-1]
	if ended || last.Name != v1alpha1.StepReleaseAttachments || !strings.Contains(last.Message, "va-db-0 (pv-db-0, used by db/db-0)") {
		t.Fatalf("with db-0 still on the node: phase %s, last step %s %s: %s; want ReleaseAttachments waiting for db-0", got.Status.Phase, last.Name, last.State, last.Message)
	}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "va-db-0"}, &storagev1.VolumeAttachment{}); err != nil {
		t.Errorf("db-0's attachment while db-0 is on the node: %v, want it kept", err)
	}
	if err := w.c.Delete(ctx, pod); err != nil { // Kubernetes' eviction and PodGC
		t.Fatal(err)
	}
	if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("phase %s once db-0 is gone, want Released", nf.Status.Phase)
	}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "va-db-0"}, &storagev1.VolumeAttachment{}); !apierrors.IsNotFound(err) {
		t.Errorf("db-0's attachment after db-0 went: %v, want it released", err)
	}
}

// With neither the out-of-service taint nor deletePods, nothing of the release removes the pods:
// their attachments are kept (Kubernetes keeps them attached too), and the fence is released.
func TestAttachmentsOfPodsNothingRemovesAreKept(t *testing.T) {
	w, _ := withDBVolume(t, func(r *v1alpha1.Release) { r.DeletePods, r.OutOfServiceTaint = ptr.To(false), ptr.To(false) })
	ctx := context.Background()
	got := w.run(t)
	if got.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("phase %s, want Released", got.Status.Phase)
	}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "va-db-0"}, &storagev1.VolumeAttachment{}); err != nil {
		t.Errorf("db-0's attachment: %v, want it kept", err)
	}
}

// attacherHolds gives w's attachment va1 its attacher's finalizer and returns it.
func attacherHolds(t *testing.T, w *world) *storagev1.VolumeAttachment {
	t.Helper()
	ctx := context.Background()
	va := &storagev1.VolumeAttachment{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "va1"}, va); err != nil {
		t.Fatal(err)
	}
	va.Finalizers = []string{attachercontroller.GetFinalizerName(va.Spec.Attacher)}
	if err := w.c.Update(ctx, va); err != nil {
		t.Fatal(err)
	}
	return va
}

// backupPod is pod backup-0 on n1, tolerating the out-of-service taint (it stays), with its
// claim data-backup-0, bound to pv-backup (not created), attached to n1 as va-backup.
func backupPod() []client.Object {
	return []client.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "backup-0"}, Spec: corev1.PodSpec{NodeName: "n1",
			Tolerations: []corev1.Toleration{{Key: v1alpha1.TaintOutOfService, Operator: corev1.TolerationOpExists}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-backup-0"}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "data-backup-0"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-backup"}},
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-backup"}, Spec: storagev1.VolumeAttachmentSpec{NodeName: "n1", Attacher: "x.csi",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-backup")}}},
	}
}

// withDBVolume is an IPMI world whose fence's release settings edit sets, and whose pod db-0 on
// n1 uses claim data-db-0, bound to pv-db-0, attached to n1 as va-db-0 (giveDBVolume).
func withDBVolume(t *testing.T, edit func(*v1alpha1.Release)) (*world, *corev1.Pod) {
	t.Helper()
	w := newWorld(t, "ipmi")
	return w, giveDBVolume(t, w, edit)
}

// giveDBVolume has w's fence's release settings edited by edit, and w's pod db-0 on n1 use
// claim data-db-0, bound to pv-db-0 (not created), attached to n1 as va-db-0; it returns db-0.
func giveDBVolume(t *testing.T, w *world, edit func(*v1alpha1.Release)) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	nf := &v1alpha1.NodeFence{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	edit(&nf.Spec.Release)
	if err := w.c.Update(ctx, nf); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: "db", Name: "db-0"}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}}}
	if err := w.c.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "data-db-0"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-db-0"}},
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-db-0"}, Spec: storagev1.VolumeAttachmentSpec{NodeName: "n1", Attacher: "x.csi",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-db-0")}}},
	} {
		if err := w.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return pod
}
