package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// Bad input changes nothing and says so: a policy the API server stores but the controller
// cannot use as written (a pod selector's label key with a space: no rule of the CRD checks
// label keys) fences no failed node of its own, carries InvalidSpec=True with the problem and
// what to do, and raises one Warning Event. Once fixed, the same dead node is fenced.
func TestInvalidPolicySaysSoAndFencesNothing(t *testing.T) {
	env := startScene(t, scenario.Options{Policy: func(p *v1alpha1.FencingPolicy) {
		p.Spec.Workloads = &v1alpha1.Workloads{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier data": "db"}}}
	}})
	startController(t, env)
	ctx := context.Background()
	c := env.Cluster.Client
	if err := env.Node(2).BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}

	p := &v1alpha1.FencingPolicy{}
	var cond *metav1.Condition
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: scenario.PolicyName}, p); err != nil {
			return false, err
		}
		cond = meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionInvalidSpec)
		return cond != nil && cond.Status == metav1.ConditionTrue, nil
	}); err != nil {
		t.Fatalf("policy %s never said InvalidSpec=True: %v; conditions %+v", scenario.PolicyName, err, p.Status.Conditions)
	}
	if cond.Reason != v1alpha1.ReasonPodSelectorInvalid || !strings.Contains(cond.Message, "spec.workloads.podSelector") ||
		!strings.Contains(cond.Message, "no failed node of the policy is fenced automatically until it is fixed") {
		t.Errorf("InvalidSpec condition %+v: want reason %s, naming the field and what it means", cond, v1alpha1.ReasonPodSelectorInvalid)
	}

	// Node-2 is dead for well beyond its lease timeout: under a usable policy it would be
	// fenced within it (TestPowerLossFailover).
	time.Sleep(leaseTimeout + 8*time.Second)
	var fences v1alpha1.NodeFenceList
	if err := c.List(ctx, &fences); err != nil {
		t.Fatal(err)
	}
	if len(fences.Items) != 0 {
		t.Errorf("%d NodeFences created under a policy the controller cannot use; want none: %v", len(fences.Items), fences.Items[0].Spec)
	}
	if offs, err := env.Node(2).BMC.OffCommands(); err != nil || offs != 0 {
		t.Errorf("%d power-off commands reached the BMC (err %v), want 0", offs, err)
	}
	var warned int
	for _, e := range eventsFor(t, env, "FencingPolicy", scenario.PolicyName) {
		if strings.HasPrefix(e, v1alpha1.ConditionInvalidSpec+":") {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d InvalidSpec events on the policy after %s of reconciles, want exactly 1 (at the transition)", warned, leaseTimeout+8*time.Second)
	}

	// Fixed: the condition turns False and the dead node is fenced.
	if err := c.Get(ctx, client.ObjectKey{Name: scenario.PolicyName}, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Workloads = nil
	if err := c.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitFence(t, env.Cluster, env.Node(2).Name(), 30*time.Second, fenceEnded)
	if err := c.Get(ctx, client.ObjectKey{Name: scenario.PolicyName}, p); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionInvalidSpec); cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonSpecUsable {
		t.Errorf("after the fix InvalidSpec is %+v, want False (%s)", cond, v1alpha1.ReasonSpecUsable)
	}
}
