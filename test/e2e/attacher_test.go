package e2e

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

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
