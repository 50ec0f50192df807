package main

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// explain reads the node, its Lease, every policy and the node's fence, and ends with the
// verdict the controller's rules give for each situation.
func TestExplain(t *testing.T) {
	cl := testCluster(t)
	c := cl.Client
	held := explainScenarios(t, c)

	tests := []struct {
		node    string
		verdict string   // the last line's start
		says    []string // more of the output
	}{
		{"explain-healthy", "explain-healthy is healthy: not fenced", []string{
			"Ready:            True (KubeletReady)",
			"Lease:            kube-node-lease/explain-healthy renewed ",
			"leaseTimeout 30s (policy explain-a): Healthy on the API's view: Lease renewed ",
			"explain-0-other      nodeSelector palisade-cli-test=explain,scenario=nobody   does not select the node",
			"explain-a            nodeSelector palisade-cli-test=explain,scenario=healthy  selects the node: USED",
			"explain-b            nodeSelector palisade-cli-test=explain,scenario=healthy  selects the node, not used (explain-a comes first)",
			"Policy explain-a\n  Dry run:          no",
			"Storm guard:      StormGuardActive=False (WithinLimit): 0 of 1 nodes look failed; 0 of 1 nodes unhealthy, at most 1 may be (maxUnhealthy 40% (default))",
			"Controller sight: ControllerBlind=False (Seeing)",
			"Detectors:        explain-healthy is not listed unhealthy",
			"Fence request:    none",
			"Out-of-service:   not tainted",
			"NodeFence: none",
		}},
		{"explain-storm", "explain-storm looks failed (Dead: dead: agent heartbeat lost; API: Lease not renewed for 45s (threshold 20s)) but is not fenced: the storm guard holds (TooManyUnhealthy: 3 of 5 nodes look failed, more than 2)", []string{
			"leaseTimeout 20s (policy explain-storm, default): Dead on the API's view: Lease not renewed for 4",
			"StormGuardActive=True (TooManyUnhealthy)",
			"Detectors:        explain-storm is listed unhealthy: Dead: dead: agent heartbeat lost",
		}},
		{"explain-blind", "explain-blind looks failed (Dead: ", []string{
			"but is not fenced: the controller is blind (WatchStale: the controller is blind since 10:00 (WatchStale))",
			"Lease:            none in kube-node-lease",
			"StormGuardActive not reported (the controller has not written it: is it running?)",
		}},
		{"explain-workloads", "explain-workloads looks failed (Dead: ", []string{
			"the controller fences it only for pods on ReadWriteOnce volumes or StatefulSet pods, and leaves it to Kubernetes if it holds none (no NodeFence yet)",
			"Workloads:        a failed node is fenced only for pods on ReadWriteOnce volumes or StatefulSet pods",
		}},
		{"explain-alive", "explain-alive looks failed (Partitioned: alive: agent heartbeats fresh) but is alive on other signals: it is not powered off blindly, since policy explain-alive's chain does not start with the Executor", nil},
		{"explain-dry", "explain-dry looks failed (Dead: ", []string{
			"but is not fenced: policy explain-dry is a dry run, so the controller only records a dry-run fence",
			"explain-dry [dry run]  nodeSelector",
			"Dry run:          YES: decisions are recorded, no fencing or release step is taken",
			"at most 3 may be (maxUnhealthy 3)",
			"Ready:            no Ready condition",
		}},
		{"explain-stale", "explain-stale is not being fenced: its Lease is expired on the API's view (Lease not renewed for 2m", []string{
			"(threshold 20s)), but policy explain-stale does not list it unhealthy: its agent or peers show it alive, or the controller is not running",
		}},
		{"explain-held", "explain-held is fenced and held: BootIDUnchanged: " + held, []string{
			`Fence request:    "disk errors", requested by alice`,
			"Out-of-service:   tainted node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, added",
			"NodeFence explain-held\n  Phase:            Released, method ipmi, token 7",
			`Trigger:          Manual, requested by alice: disk errors`,
			"Release:          done ",
			"2 pods deleted, 1 volume attachment released",
			"Conditions:\n    Fenced=True PowerOffConfirmed: power state Off read back",
			"Recovered=False BootIDUnchanged: " + held,
			"Steps:\n    PowerOff ipmi Succeeded, ",
		}},
		{"explain-fencing", "explain-fencing is being fenced: Fencing, method ipmi, last step ConfirmOff Started (PowerStillOn): the BMC still reads power On", []string{
			"Phase:            Fencing, method ipmi, token 21",
			"ConfirmOff ipmi Started (PowerStillOn), ",
		}},
		{"explain-failed", "explain-failed is not fenced: its fence failed (BMCUnreachable: no answer from the BMC within 1m0s) and released nothing", nil},
		{"explain-badrequest", "explain-badrequest is not being fenced: its fence request is invalid and ignored: annotation palisade.dev/fence-request is empty", []string{
			`Fence request:    "  ", requested by an unrecorded user (INVALID, the controller ignores it`,
		}},
		{"explain-uncovered", "explain-uncovered is not covered: no FencingPolicy selects it, so Palisade never fences it", nil},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			r := runCLI(t, c, "", "explain", tc.node)
			if r.code != exitOK {
				t.Fatalf("explain %s: %s", tc.node, r)
			}
			if got := lastLine(r.out); !strings.HasPrefix(got, tc.verdict) {
				t.Errorf("verdict:\n got %s\nwant %s...\n\n%s", got, tc.verdict, r.out)
			}
			wantContains(t, "explain "+tc.node, r.out, tc.says...)
			if t.Failed() || tc.node == "explain-held" {
				t.Logf("explain %s:\n%s", tc.node, r.out)
			}
		})
	}

	t.Run("a node that does not exist", func(t *testing.T) {
		r := runCLI(t, c, "", "explain", "explain-nope")
		if r.code != exitError {
			t.Fatalf("explain of a missing node: %s", r)
		}
		wantContains(t, "the error", r.errOut, "node explain-nope does not exist and has no NodeFence")
	})
	t.Run("a deleted node's fence", func(t *testing.T) {
		makeFence(t, c, "explain-gone", "explain-fenced", released("NodeGone", "node explain-gone no longer exists"))
		r := runCLI(t, c, "", "explain", "explain-gone")
		if r.code != exitOK {
			t.Fatalf("explain of a deleted node: %s", r)
		}
		wantContains(t, "explain", r.out, "does not exist (deleted); its NodeFence is the record of its fence",
			"explain-gone is fenced and held: NodeGone: node explain-gone no longer exists")
	})
}

// explainScenarios creates a node (and its policy, Lease and fence) for each scenario of
// TestExplain; it returns the Recovered message of the held node's fence.
func explainScenarios(t *testing.T, c client.Client) string {
	t.Helper()
	label := func(scenario string) map[string]string {
		return map[string]string{"palisade-cli-test": "explain", "scenario": scenario}
	}
	dead := func(node string) *v1alpha1.FencingPolicyStatus {
		return &v1alpha1.FencingPolicyStatus{Nodes: 5, UnhealthyNodes: 1, Unhealthy: []v1alpha1.NodeVerdict{
			{Node: node, Verdict: "Dead", Reason: "dead: agent heartbeat lost; API: Lease not renewed for 45s (threshold 20s)"}}}
	}
	seeing := condition(v1alpha1.ConditionControllerBlind, metav1.ConditionFalse, v1alpha1.ReasonSeeing, "the controller sees fresh renewals")

	// healthy: two policies select it (the first by name is used), a fresh Lease.
	makePolicy(t, c, "explain-a", label("healthy"), func(s *v1alpha1.FencingPolicySpec) {
		s.Detection.LeaseTimeout = &metav1.Duration{Duration: 30 * time.Second}
	}, &v1alpha1.FencingPolicyStatus{Nodes: 1, Conditions: []metav1.Condition{seeing,
		condition(v1alpha1.ConditionStormGuardActive, metav1.ConditionFalse, v1alpha1.ReasonWithinLimit, "0 of 1 nodes look failed")}})
	makePolicy(t, c, "explain-b", label("healthy"), nil, nil)
	makePolicy(t, c, "explain-0-other", label("nobody"), nil, nil)
	makeNode(t, c, nodeSpec{name: "explain-healthy", labels: label("healthy"), ready: corev1.ConditionTrue, bootID: "boot-1"})
	makeLease(t, c, "explain-healthy", 3*time.Second)

	// storm: listed Dead, the storm guard holds.
	makePolicy(t, c, "explain-storm", label("storm"), nil, func() *v1alpha1.FencingPolicyStatus {
		s := dead("explain-storm")
		s.UnhealthyNodes = 3
		s.Conditions = []metav1.Condition{seeing, condition(v1alpha1.ConditionStormGuardActive, metav1.ConditionTrue,
			v1alpha1.ReasonTooManyUnhealthy, "3 of 5 nodes look failed, more than 2")}
		return s
	}())
	makeNode(t, c, nodeSpec{name: "explain-storm", labels: label("storm"), ready: corev1.ConditionUnknown})
	makeLease(t, c, "explain-storm", 45*time.Second)

	// blind: listed Dead, the controller cannot see.
	makePolicy(t, c, "explain-blind", label("blind"), nil, func() *v1alpha1.FencingPolicyStatus {
		s := dead("explain-blind")
		s.Conditions = []metav1.Condition{condition(v1alpha1.ConditionControllerBlind, metav1.ConditionTrue, v1alpha1.ReasonWatchStale,
			"the controller is blind since 10:00 (WatchStale)")}
		return s
	}())
	makeNode(t, c, nodeSpec{name: "explain-blind", labels: label("blind"), ready: corev1.ConditionUnknown})

	// alive: Partitioned, and the chain does not start with the Executor.
	makePolicy(t, c, "explain-alive", label("alive"), nil, &v1alpha1.FencingPolicyStatus{Nodes: 5, UnhealthyNodes: 1,
		Unhealthy: []v1alpha1.NodeVerdict{{Node: "explain-alive", Verdict: "Partitioned", Reason: "alive: agent heartbeats fresh"}}})
	makeNode(t, c, nodeSpec{name: "explain-alive", labels: label("alive"), ready: corev1.ConditionUnknown})

	// dry: listed Dead under a dry-run policy with a custom storm guard.
	makePolicy(t, c, "explain-dry", label("dry"), func(s *v1alpha1.FencingPolicySpec) {
		s.DryRun = true
		s.StormGuard.MaxUnhealthy = ptrIntOrString(intstr.FromInt32(3))
	}, dead("explain-dry"))
	makeNode(t, c, nodeSpec{name: "explain-dry", labels: label("dry")})

	// workloads: listed Dead under a policy that fences only for StatefulSet pods.
	makePolicy(t, c, "explain-workloads", label("workloads"), func(s *v1alpha1.FencingPolicySpec) {
		s.Workloads = &v1alpha1.Workloads{StatefulSets: true, RWOVolumes: true}
	}, dead("explain-workloads"))
	makeNode(t, c, nodeSpec{name: "explain-workloads", labels: label("workloads")})

	// stale: no policy status lists it, but its Lease expired on the API's view.
	makePolicy(t, c, "explain-stale", label("stale"), nil, nil)
	makeNode(t, c, nodeSpec{name: "explain-stale", labels: label("stale"), ready: corev1.ConditionTrue})
	makeLease(t, c, "explain-stale", 2*time.Minute)

	// fenced and held, tainted; being fenced; failed; fence request invalid; not covered.
	makePolicy(t, c, "explain-fenced", label("fenced"), nil, nil)
	makeNode(t, c, nodeSpec{name: "explain-held", labels: label("fenced"), ready: corev1.ConditionTrue, bootID: "boot-1", taint: true,
		annotations: map[string]string{v1alpha1.AnnotationFenceRequest: "disk errors", v1alpha1.AnnotationFenceRequestedBy: "alice"}})
	held := "node explain-held is back but has not rebooted since it was fenced (boot ID boot-1): the processes of its workload may have outlived the fence"
	makeFence(t, c, "explain-held", "explain-fenced", func(nf *v1alpha1.NodeFence) {
		released("BootIDUnchanged", held)(nf)
		nf.Spec.Trigger, nf.Spec.Verdict, nf.Spec.RequestedBy, nf.Spec.Reason = v1alpha1.TriggerManual, "", "alice", "disk errors"
	})
	makeNode(t, c, nodeSpec{name: "explain-fencing", labels: label("fenced"), ready: corev1.ConditionUnknown})
	makeFence(t, c, "explain-fencing", "explain-fenced", func(nf *v1alpha1.NodeFence) {
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Method: "ipmi", Token: 21, Steps: []v1alpha1.Step{
			step(v1alpha1.StepPowerOff, "ipmi", v1alpha1.StepSucceeded, "", "power-off command accepted"),
			step(v1alpha1.StepConfirmOff, "ipmi", v1alpha1.StepStarted, "PowerStillOn", "the BMC still reads power On")}}
	})
	makeNode(t, c, nodeSpec{name: "explain-failed", labels: label("fenced"), ready: corev1.ConditionUnknown})
	makeFence(t, c, "explain-failed", "explain-fenced", func(nf *v1alpha1.NodeFence) {
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFailed, Token: 22, Conditions: []metav1.Condition{
			condition(v1alpha1.ConditionFenced, metav1.ConditionFalse, "BMCUnreachable", "no answer from the BMC within 1m0s")}}
	})
	makeNode(t, c, nodeSpec{name: "explain-badrequest", labels: label("fenced"), ready: corev1.ConditionTrue,
		annotations: map[string]string{v1alpha1.AnnotationFenceRequest: "  "}})
	makeNode(t, c, nodeSpec{name: "explain-uncovered", labels: map[string]string{"palisade-cli-test": "explain"}, ready: corev1.ConditionTrue})
	return held
}

func ptrIntOrString(v intstr.IntOrString) *intstr.IntOrString { return &v }
