package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// foreignFinalizer stands for another controller's finalizer on the workload pod.
const foreignFinalizer = "example.com/hold"

// adcSync is kube-controller-manager's attach-detach reconcile sync period in this test: the
// period after which the attach-detach controller notices an attachment deleted behind its back
// and attaches again what its desired state still holds (1 minute by default).
const adcSync = 5 * time.Second

// A pod that another controller's finalizer keeps does not hold the node: once the pod is marked
// Failed and deleted with grace period 0, the fence goes on, the node's attachment is released,
// and the attach-detach controller does not attach the volume again while the pod object
// lingers. When the other controller lets go, the replacement runs elsewhere.
func TestFinalizerHeldPodReleasesNode(t *testing.T) {
	env := startScene(t, scenario.Options{KCMFlags: []string{"--attach-detach-reconcile-sync-period=" + adcSync.String()}})
	startController(t, env)
	w := deploy(t, env)
	ctx := context.Background()
	n1 := env.Node(1)
	setFinalizers(t, env, w.Pod, w.Pod.Finalizers, append(slices.Clone(w.Pod.Finalizers), foreignFinalizer))

	if err := n1.BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, phaseIs(v1alpha1.PhaseReleased))
	if diff := cmp.Diff(fullTrace, trace(nf)); diff != "" {
		t.Errorf("step trace (-want +got):\n%s", diff)
	}
	if nf.Status.PodsDeleted != 1 {
		t.Errorf("podsDeleted = %d, want 1", nf.Status.PodsDeleted)
	}
	want := fmt.Sprintf("1 pod force-deleted; 1 pod marked Failed and deleted, kept only by finalizers: %s/%s (%s)", w.Pod.Namespace, w.Pod.Name, foreignFinalizer)
	if got := stepMessage(nf, string(v1alpha1.StepDeletePods)); got != want {
		t.Errorf("DeletePods message %q, want %q", got, want)
	}
	assertMarkedAndHeld(t, env, w)
	if vas, err := env.Attachments(ctx, n1.Name()); err != nil || len(vas) != 0 {
		t.Errorf("%d attachments left on %s after the release (err %v)", len(vas), n1.Name(), err)
	}
	assertNoAttachmentFor(t, env, n1.Name(), 3*adcSync)
	assertMarkedAndHeld(t, env, w) // the pod lingered all along
	if nf := waitFence(t, env.Cluster, n1.Name(), time.Second, phaseIs(v1alpha1.PhaseReleased)); nf.Status.PodsDeleted != 1 {
		t.Errorf("podsDeleted = %d a while after the release, want 1", nf.Status.PodsDeleted)
	}

	// The other controller lets go: the object goes, the replacement runs on another node.
	setFinalizers(t, env, w.Pod, []string{foreignFinalizer}, nil)
	pod, err := env.WaitPodRunning(ctx, "", n1.Name(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replacement %s Running on %s", pod.Name, pod.Spec.NodeName)
}

// setFinalizers replaces the pod's finalizers, checking the old ones with a JSON patch test.
func setFinalizers(t *testing.T, env *scenario.Env, pod *corev1.Pod, old, fins []string) {
	t.Helper()
	quote := func(fs []string) string {
		q := make([]string, len(fs))
		for i, f := range fs {
			q[i] = fmt.Sprintf("%q", f)
		}
		return "[" + strings.Join(q, ",") + "]"
	}
	op := "replace"
	if len(old) == 0 {
		op = "add"
	}
	patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/uid","value":%q},{"op":%q,"path":"/metadata/finalizers","value":%s}]`, pod.UID, op, quote(fins))
	target := &corev1.Pod{}
	target.Namespace, target.Name = pod.Namespace, pod.Name
	if err := env.Cluster.Client.Patch(context.Background(), target, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		t.Fatalf("setting the finalizers of pod %s to %v: %v", pod.Name, fins, err)
	}
}

// assertMarkedAndHeld checks that the workload pod's object still exists, kept by the foreign
// finalizer, marked Failed with a DisruptionTarget condition and deleted with grace period 0.
func assertMarkedAndHeld(t *testing.T, env *scenario.Env, w *scenario.Workload) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := env.Cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(w.Pod), pod); err != nil || pod.UID != w.Pod.UID {
		t.Fatalf("the pod kept by %s is gone or replaced (uid %s, err %v)", foreignFinalizer, pod.UID, err)
	}
	disrupted := false
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			disrupted = true
			t.Logf("pod %s DisruptionTarget: %s: %s", pod.Name, c.Reason, c.Message)
		}
	}
	if pod.Status.Phase != corev1.PodFailed || !disrupted {
		t.Errorf("pod %s phase %s, DisruptionTarget %t; want Failed and true", pod.Name, pod.Status.Phase, disrupted)
	}
	grace := pod.DeletionGracePeriodSeconds
	if pod.DeletionTimestamp == nil || grace == nil || *grace != 0 {
		t.Errorf("pod %s deletionTimestamp %v, deletionGracePeriodSeconds %v; want set and 0", pod.Name, pod.DeletionTimestamp, grace)
	}
	if !slices.Contains(pod.Finalizers, foreignFinalizer) {
		t.Errorf("pod %s finalizers %v lost %s", pod.Name, pod.Finalizers, foreignFinalizer)
	}
}

// assertNoAttachmentFor checks that no VolumeAttachment appears on node during d.
func assertNoAttachmentFor(t *testing.T, env *scenario.Env, node string, d time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, d, true, func(ctx context.Context) (bool, error) {
		vas, err := env.Attachments(ctx, node)
		if err != nil {
			// The poll's own deadline can cut a List short; that is the end of the watch, not
			// an attachment.
			return false, ctx.Err()
		}
		if len(vas) > 0 {
			return false, fmt.Errorf("attachment %s of %s re-created on %s while the pod lingers", vas[0].Name, *vas[0].Spec.Source.PersistentVolumeName, node)
		}
		return false, nil
	})
	if !wait.Interrupted(err) {
		t.Error(err)
	}
}
