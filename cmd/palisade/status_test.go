package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

func TestRender(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	policies := []v1alpha1.FencingPolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: "workers"},
		Spec: v1alpha1.FencingPolicySpec{Methods: []v1alpha1.Method{{Name: "stop", Type: v1alpha1.MethodExecutor, Level: "both"},
			{Name: "ipmi", Type: v1alpha1.MethodIPMI}, {Name: "power", Type: v1alpha1.MethodIPMI, Level: "both"}}},
		Status: v1alpha1.FencingPolicyStatus{Nodes: 3, UnhealthyNodes: 2, Unhealthy: []v1alpha1.NodeVerdict{
			{Node: "n1", Verdict: "Dead", Reason: "no path"}, {Node: "n3", Verdict: "Suspect", Reason: "Lease late"}}, Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionStormGuardActive, Status: "True", Message: "2 of 3 nodes look failed"}}},
	}}
	fences := []v1alpha1.NodeFence{
		{ObjectMeta: metav1.ObjectMeta{Name: "n1", CreationTimestamp: metav1.NewTime(now.Add(-90 * time.Second))},
			Spec: v1alpha1.NodeFenceSpec{NodeName: "n1", Trigger: v1alpha1.TriggerDetected, Verdict: "Dead"},
			Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFailed, Method: "ipmi", Token: 12, Steps: []v1alpha1.Step{
				{Name: v1alpha1.StepPowerOff, State: v1alpha1.StepFailed, Reason: "BMCAuthFailed", Message: "check the Secret"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n2", CreationTimestamp: metav1.NewTime(now.Add(-5 * time.Second))},
			Spec: v1alpha1.NodeFenceSpec{NodeName: "n2", Trigger: v1alpha1.TriggerManual}},
	}
	var b bytes.Buffer
	if err := render(&b, policies, fences, now); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"POLICY   NODES  UNHEALTHY  STORM GUARD                       METHODS\n" +
		"workers  3      2          ACTIVE: 2 of 3 nodes look failed  stop(Executor) + power(IPMI) → ipmi(IPMI)\n" +
		"\n" +
		"UNHEALTHY NODE  POLICY   VERDICT  WHY\n" +
		"n1              workers  Dead     no path\n" +
		"n3              workers  Suspect  Lease late\n" +
		"\n" +
		"NODE  PHASE   METHOD  TRIGGER   VERDICT  TOKEN  AGE    LAST STEP\n" +
		"n2    -       -       Manual    -        -      5s     -\n" +
		"n1    Failed  ipmi    Detected  Dead     12     1m30s  PowerOff Failed (BMCAuthFailed): check the Secret\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("render (-want +got):\n%s", diff)
	}
}
