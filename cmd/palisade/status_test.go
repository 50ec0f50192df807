package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

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
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "zones"},
		Spec:       v1alpha1.FencingPolicySpec{Methods: []v1alpha1.Method{{Name: "ipmi", Type: v1alpha1.MethodIPMI}}},
		Status: v1alpha1.FencingPolicyStatus{Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionStormGuardActive, Status: "False", Message: "0 of 0 nodes look failed"},
			{Type: v1alpha1.ConditionInvalidSpec, Status: "True", Reason: v1alpha1.ReasonNodeSelectorInvalid, Message: "spec.nodeSelector does not parse"}}},
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
		"POLICY   NODES  UNHEALTHY  STORM GUARD                                                   METHODS\n" +
		"workers  3      2          ACTIVE: 2 of 3 nodes look failed                              stop(Executor) + power(IPMI) → ipmi(IPMI)\n" +
		"zones    0      0          INVALID SPEC (NodeSelectorInvalid, see palisade explain): ok  ipmi(IPMI)\n" +
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

// status reads the cluster: the tables by default and with -o wide, the NodeFence list as
// kubectl prints it with -o json and -o yaml, through a kubeconfig file as kubectl reads one.
func TestStatus(t *testing.T) {
	cl := testCluster(t)
	c := cl.Client
	sel := map[string]string{"palisade-cli-test": "status"}
	makePolicy(t, c, "status-policy", sel, func(s *v1alpha1.FencingPolicySpec) {
		s.DryRun = true
		s.Detection.LeaseTimeout = &metav1.Duration{Duration: 40 * time.Second}
	}, &v1alpha1.FencingPolicyStatus{Nodes: 2, UnhealthyNodes: 1,
		Unhealthy: []v1alpha1.NodeVerdict{{Node: "status-2", Verdict: "Dead", Reason: "no signal on any path"}},
		Conditions: []metav1.Condition{
			condition(v1alpha1.ConditionStormGuardActive, metav1.ConditionFalse, v1alpha1.ReasonWithinLimit, "1 of 2"),
			condition(v1alpha1.ConditionControllerBlind, metav1.ConditionTrue, v1alpha1.ReasonStarting, "starting")}})
	makeFence(t, c, "status-1", "status-policy", func(nf *v1alpha1.NodeFence) {
		released("BootIDUnchanged", "not rebooted")(nf)
		nf.Spec.Trigger, nf.Spec.Verdict, nf.Spec.RequestedBy = v1alpha1.TriggerManual, "", "alice"
	})
	makeFence(t, c, "status-2", "status-policy", func(nf *v1alpha1.NodeFence) {
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRecovered, Method: "ipmi", Token: 8, Recovery: &v1alpha1.RecoveryRecord{
			How: v1alpha1.RecoveryConfirmedClean, Time: metav1.Now(), RequestedBy: "bob", Reason: "reinstalled"}}
	})

	t.Run("tables", func(t *testing.T) {
		r := runCLI(t, nil, "", "--kubeconfig", cl.KubeconfigPath(), "status")
		if r.code != exitOK {
			t.Fatalf("status: %s", r)
		}
		wantContains(t, "status", r.out, "POLICY NODES UNHEALTHY STORM GUARD METHODS", "status-policy 2 1 ok ipmi(IPMI)",
			"status-2 status-policy Dead no signal on any path",
			"NODE PHASE METHOD TRIGGER VERDICT TOKEN AGE LAST STEP", "status-1 Released ipmi Manual - 7")
		if strings.Contains(r.out, "REQUESTED BY") {
			t.Errorf("status without -o wide shows the wide columns:\n%s", r.out)
		}
	})
	t.Run("wide", func(t *testing.T) {
		r := runCLI(t, nil, "", "status", "-o", "wide", "--kubeconfig", cl.KubeconfigPath())
		if r.code != exitOK {
			t.Fatalf("status -o wide: %s", r)
		}
		t.Logf("status -o wide:\n%s", r.out)
		wantContains(t, "status -o wide", r.out,
			"POLICY NODES UNHEALTHY STORM GUARD DRY RUN LEASE TIMEOUT CONTROLLER SIGHT METHODS",
			"status-policy 2 1 ok true 40s BLIND: Starting ipmi(IPMI)",
			"NODE PHASE METHOD TRIGGER VERDICT TOKEN AGE POLICY REQUESTED BY RECOVERY REASON LAST STEP",
			"status-1 Released ipmi Manual - 7", "status-policy alice held: BootIDUnchanged Dead: no signal on any path ReleaseAttachments Succeeded",
			"status-2 Recovered ipmi Detected Dead 8", "status-policy - ConfirmedClean by bob")
	})
	for _, format := range []string{"json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			r := runCLI(t, c, "", "status", "--output="+format)
			if r.code != exitOK {
				t.Fatalf("status -o %s: %s", format, r)
			}
			var list v1alpha1.NodeFenceList
			if err := yaml.UnmarshalStrict([]byte(r.out), &list); err != nil {
				t.Fatalf("parsing status -o %s: %v\n%s", format, err, r.out)
			}
			if list.Kind != "NodeFenceList" || list.APIVersion != "fencing.palisade.dev/v1alpha1" {
				t.Errorf("list kind %s/%s, want fencing.palisade.dev/v1alpha1 NodeFenceList", list.APIVersion, list.Kind)
			}
			got := map[string]v1alpha1.NodeFence{}
			for _, nf := range list.Items {
				got[nf.Name] = nf
				if nf.Kind != "NodeFence" || nf.ManagedFields != nil {
					t.Errorf("item %s: kind %q, managedFields %v; want NodeFence, none", nf.Name, nf.Kind, nf.ManagedFields)
				}
			}
			if nf := got["status-1"]; nf.Status.Phase != v1alpha1.PhaseReleased || nf.Spec.RequestedBy != "alice" || len(nf.Status.Steps) != 3 {
				t.Errorf("status-1 read back as phase %s, requestedBy %q, %d steps", nf.Status.Phase, nf.Spec.RequestedBy, len(nf.Status.Steps))
			}
			if nf := got["status-2"]; nf.Status.Recovery == nil || nf.Status.Recovery.RequestedBy != "bob" {
				t.Errorf("status-2 read back without its recovery: %+v", nf.Status)
			}
		})
	}
	t.Run("unknown format", func(t *testing.T) {
		r := runCLI(t, c, "", "status", "-o", "table")
		if r.code != exitUsage {
			t.Fatalf("status -o table: %s", r)
		}
		wantContains(t, "the error", r.errOut, `unknown output format "table": use wide, json or yaml`, "usage: palisade status")
	})
}
