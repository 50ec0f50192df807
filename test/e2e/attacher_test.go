package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// A CSI attacher that is down when a fence releases is waited for, well past the controller's
// --attachment-force-after: the attachment's finalizer stays, so the volume is not left
// published to the fenced node in the storage backend (the test bed's plugin would then refuse
// it to any other node for good). When the real attacher runs again, its first detach fails
// twice (a backend busy after the outage): that error, first seen long after the deletion, is
// waited on too, not taken as the attacher's last word. The attacher's retry then detaches the
// volume (ControllerUnpublishVolume), the fence is Released, and the replacement runs on another
// node with its volume published there.
func TestAttacherDownIsWaitedFor(t *testing.T) {
	// Longer than the busy backend's error stands (the attacher retries after 1 s, then 2 s).
	const forceAfter = 6 * time.Second
	env := startScene(t, scenario.Options{})
	ctx := context.Background()
	if err := env.StartController(ctx, func(o *app.Options) { o.AttachmentForceAge = forceAfter }); err != nil {
		t.Fatalf("starting controller: %v", err)
	}
	w := deploy(t, env)
	n1 := env.Node(1)
	const volume = "vol-db-0"
	before, ok := env.Cluster.CSI.Published(volume)
	if !ok {
		t.Fatalf("volume %s is not published before the power loss", volume)
	}
	if err := env.Cluster.StopCSIAttacher(); err != nil {
		t.Fatal(err)
	}
	if err := n1.BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}
	releasing := func(nf *v1alpha1.NodeFence) bool {
		n := len(nf.Status.Steps)
		return n > 0 && nf.Status.Steps[n-1].Name == v1alpha1.StepReleaseAttachments
	}
	waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, releasing)
	time.Sleep(3 * forceAfter) // several passes of the step, each well past forceAfter
	nf := waitFence(t, env.Cluster, n1.Name(), time.Second, releasing)
	last := nf.Status.Steps[len(nf.Status.Steps)-1]
	if nf.Status.Phase == v1alpha1.PhaseReleased || last.State != v1alpha1.StepStarted || last.Reason != "AttachmentsRemaining" {
		t.Errorf("with the attacher down: phase %s, ReleaseAttachments %s (%s: %s); want the step waiting with AttachmentsRemaining",
			nf.Status.Phase, last.State, last.Reason, last.Message)
	}
	t.Logf("with the attacher down %s past the force delay: %s", 3*forceAfter, last.Message)
	vas, err := env.Attachments(ctx, n1.Name())
	if err != nil || len(vas) != 1 || vas[0].Name != w.Attachment.Name || vas[0].DeletionTimestamp == nil || len(vas[0].Finalizers) == 0 {
		t.Errorf("attachments of %s: %d (err %v); want %s deleted and still held by the attacher's finalizer", n1.Name(), len(vas), err, w.Attachment.Name)
	}
	if now, _ := env.Cluster.CSI.Published(volume); now != before {
		t.Errorf("volume %s published to %q with the attacher down, want still %q", volume, now, before)
	}

	env.Cluster.CSI.FailUnpublish(2)
	if err := env.Cluster.StartCSIAttacher(); err != nil {
		t.Fatal(err)
	}
	nf = waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, phaseIs(v1alpha1.PhaseReleased))
	if left := env.Cluster.CSI.UnpublishFailuresLeft(); left != 0 {
		t.Errorf("%d of the busy backend's 2 unpublish failures never came: the attacher's detach error was not exercised", left)
	}
	// Deleted by Palisade, or first by the attach-detach controller once the taint is on and
	// the pod gone; removed by the attacher either way.
	if vas, err := env.Attachments(ctx, n1.Name()); err != nil || len(vas) != 0 || nf.Status.AttachmentsReleased > 1 {
		t.Errorf("%d attachments left on %s (err %v), %d released by the fence; want none left, at most 1", len(vas), n1.Name(), err, nf.Status.AttachmentsReleased)
	}
	pod, err := env.WaitPodRunning(ctx, "", n1.Name(), 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The attach-detach controller attaches the volume to the replacement's node through the
	// attacher; the plugin refuses that while the volume is still published to the fenced node.
	var after string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		after, ok = env.Cluster.CSI.Published(volume)
		return ok && after != before, nil
	})
	if err != nil {
		t.Errorf("volume %s published to %q (published %v) a minute after the replacement ran, want the replacement's node, not %q", volume, after, ok, before)
	}
	t.Logf("replacement %s Running on %s, volume published to %s", pod.Name, pod.Spec.NodeName, after)
}

// A pod that tolerates the out-of-service taint is left on its fenced node, as Kubernetes leaves
// it, and so is its volume: the fence releases the database's attachment, not the attachment of
// the pod left there, which the real attacher would otherwise unpublish (ControllerUnpublishVolume)
// under a pod that may still run. The attach-detach controller keeps it attached too.
func TestAttachmentOfAPodLeftOnTheNodeIsKept(t *testing.T) {
	env := startScene(t, scenario.Options{})
	startController(t, env)
	ctx := context.Background()
	deploy(t, env)
	n1 := env.Node(1)
	const (
		pv, claim, volume = "pv-backup", "data-backup", "vol-backup"
	)
	for _, o := range []client.Object{
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv}, Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: scenario.Namespace, Name: claim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: scenario.CSIDriver, VolumeHandle: volume}}}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.Namespace, Name: claim}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(""), VolumeName: pv,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.Namespace, Name: "backup-0"}, Spec: corev1.PodSpec{NodeName: n1.Name(),
			Tolerations: []corev1.Toleration{{Key: v1alpha1.TaintOutOfService, Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "backup", Image: "registry.k8s.io/pause:3.10", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes:     []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}},
	} {
		if err := env.Cluster.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	attachmentOf := func(pvName string) *storagev1.VolumeAttachment {
		vas, err := env.Attachments(ctx, n1.Name())
		if err != nil {
			t.Fatal(err)
		}
		for i := range vas {
			if src := vas[i].Spec.Source.PersistentVolumeName; src != nil && *src == pvName {
				return &vas[i]
			}
		}
		return nil
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		on, ok := env.Cluster.CSI.Published(volume)
		return ok && on == n1.Name() && attachmentOf(pv) != nil, nil
	})
	if err != nil {
		t.Fatalf("volume %s of backup-0 not attached to %s: %v", volume, n1.Name(), err)
	}
	if err := n1.BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, phaseIs(v1alpha1.PhaseReleased))
	if _, err := env.WaitPodRunning(ctx, "", n1.Name(), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // the attacher's and the attach-detach controller's passes after the release
	if va := attachmentOf(pv); va == nil || va.DeletionTimestamp != nil {
		t.Errorf("attachment of %s, used by backup-0 left on %s: %+v, want it kept", pv, n1.Name(), va)
	}
	if on, ok := env.Cluster.CSI.Published(volume); !ok || on != n1.Name() {
		t.Errorf("volume %s published to %q (%v), want still %s", volume, on, ok, n1.Name())
	}
	if va := attachmentOf(scenario.VolumeName); va != nil {
		t.Errorf("the database's attachment %s is still on %s", va.Name, n1.Name())
	}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: scenario.Namespace, Name: "backup-0"}, &corev1.Pod{}); err != nil {
		t.Errorf("backup-0, tolerating the taint: %v, want it left on the node", err)
	}
	for _, s := range nf.Status.Steps {
		if s.Name == v1alpha1.StepReleaseAttachments {
			t.Logf("ReleaseAttachments: %s", s.Message)
			if !strings.Contains(s.Message, "used by default/backup-0") {
				t.Errorf("ReleaseAttachments says %q: want the attachment kept named, and why", s.Message)
			}
		}
	}
}
