package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// The check behind invariant 1's tests must be able to fail: with no controller running, the
// node is tainted first and a confirmed fence is recorded afterwards; the tracker must say the
// release came first.
func TestTrackerCatchesReleaseBeforeConfirmation(t *testing.T) {
	env := startScene(t, scenario.Options{NoPolicy: true})
	w := deploy(t, env)
	ctx := context.Background()
	n1 := env.Node(1)
	tr, err := env.Track(ctx, n1, w.Pod, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	if err := n1.BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: n1.Name()}, node); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: v1alpha1.TaintOutOfServiceValue, Effect: corev1.TaintEffectNoExecute})
	if err := env.Cluster.Client.Patch(ctx, node, patch); err != nil {
		t.Fatal(err)
	}
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}, Spec: v1alpha1.NodeFenceSpec{
		NodeName: n1.Name(), Trigger: v1alpha1.TriggerManual, Methods: scenario.NewPolicy(0).Spec.Methods}}
	if err := env.Cluster.Client.Create(ctx, nf); err != nil {
		t.Fatal(err)
	}
	nf.Status.Steps = []v1alpha1.Step{{Name: v1alpha1.StepConfirmOff, State: v1alpha1.StepSucceeded, StartTime: metav1.Now()}}
	if err := env.Cluster.Client.Status().Update(ctx, nf); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Wait(ctx, scenario.OffConfirmed, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if ok, first := tr.ConfirmedBeforeRelease(); ok {
		t.Errorf("tracker reports the fence confirmed before the first release (%s), but the taint came first", first)
	}
}
