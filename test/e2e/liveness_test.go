package e2e

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// Node 1's BMC address is node 3's (a swapped address): the power-off of node 1 turns node 3
// off and reads back Off from node 3's BMC. Node 1 keeps renewing its Lease, so nothing of
// node 1 is released; the method fails with NodeAliveAfterFence, the chain escalates to its
// next method (a self-fence, which cannot confirm while the node renews and fails in turn),
// and the fence ends Failed with the node's workload untouched.
func TestFenceOfTheWrongMachineReleasesNothing(t *testing.T) {
	env := startScene(t, scenario.Options{Policy: func(p *v1alpha1.FencingPolicy) {
		p.Spec.Methods = append(p.Spec.Methods, v1alpha1.Method{Name: "self-fence", Type: v1alpha1.MethodSelfFence,
			Timeout:   &metav1.Duration{Duration: 8 * time.Second},
			SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 3 * time.Second}}})
	}})
	startController(t, env)
	w := deploy(t, env)
	n1, n3 := env.Node(1), env.Node(3)
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationBMCAddress: n3.BMC.Address()})
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: fence node 1 through a swapped BMC address"})

	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, phaseIs(v1alpha1.PhaseFailed))
	t.Logf("trace: %v", trace(nf))
	if on, err := n3.BMC.PoweredOn(); err != nil || on {
		t.Fatalf("node 3's power on = %t (%v): the swapped address did not power off the other machine, the test did not test", on, err)
	}
	var disproved *v1alpha1.Step
	for i, s := range nf.Status.Steps {
		if s.State == v1alpha1.StepFailed && s.Reason == v1alpha1.ReasonNodeAliveAfterFence {
			disproved = &nf.Status.Steps[i]
			if rest := nf.Status.Steps[i+1:]; len(rest) == 0 || rest[0].Method != "self-fence" {
				t.Errorf("after the disproved power-off the chain did not escalate to self-fence: %v", trace(nf))
			}
		}
	}
	if disproved == nil || disproved.Method != nf.Spec.Methods[0].Name {
		t.Fatalf("no step of method %s failed with %s: %v", nf.Spec.Methods[0].Name, v1alpha1.ReasonNodeAliveAfterFence, trace(nf))
	}
	t.Logf("disproved: %s", disproved.Message)
	for _, s := range nf.Status.Steps {
		if slices.Contains([]v1alpha1.StepName{v1alpha1.StepTaint, v1alpha1.StepDeletePods, v1alpha1.StepReleaseAttachments}, s.Name) {
			t.Errorf("release step %s taken on a node that was alive: %v", s.Name, trace(nf))
		}
	}
	if st, _, _ := condition(nf, v1alpha1.ConditionReleased); st != "False" {
		t.Errorf("Released condition = %q, want False", st)
	}
	if !hasEvent(eventsFor(t, env, "Node", n1.Name()), v1alpha1.ReasonNodeAliveAfterFence) {
		t.Errorf("no %s event on node %s", v1alpha1.ReasonNodeAliveAfterFence, n1.Name())
	}
	assertNothingReleased(t, env, w)
	if on, err := n1.BMC.PoweredOn(); err != nil || !on {
		t.Errorf("node 1's own BMC: power on = %t (%v), want on: nothing was meant to reach it", on, err)
	}
}
