package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

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
		{"explain-workloads", "explain-workloads looks failed (Dead: dead: agent heartbeat lost; API: Lease not renewed for 45s (threshold 20s)): " +
			"the controller is about to fence it for pod default/explain-postgres-0 (StatefulSet pod with ReadWriteOnce volume data-explain-postgres-0) (no NodeFence yet)", nil},
		{"explain-stateless", "explain-stateless looks failed (Dead: dead: agent heartbeat lost; API: Lease not renewed for 45s (threshold 20s)) but is not fenced: " +
			"none of its pods needs fencing under policy explain-workloads, which fences only for pods on ReadWriteOnce volumes or StatefulSet pods; " +
			"the controller leaves it to Kubernetes, which replaces its pods once the node is NotReady", nil},
		{"explain-alive", "explain-alive looks failed (Partitioned: alive: agent heartbeats fresh) but is alive on other signals: it is not powered off blindly, since policy explain-alive's chain does not start with the Executor", nil},
		{"explain-dry", "explain-dry looks failed (Dead: ", []string{
			"but is not fenced: policy explain-dry is a dry run, so the controller only records a dry-run fence",
			"explain-dry [dry run]  nodeSelector",
			"Dry run:          YES: decisions are recorded, no fencing or release step is taken",
			"INVALID SPEC:     SelfFenceTimeoutTooShort: method self: its timeout (1m0s) does not exceed selfFence.safeAfter (1m0s)",
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
			"Boot IDs:         boot-1 when the fence began; boot-mid at its confirmation; its agent last heard in boot-mid (unless a power-off was confirmed",
			"Release:          done ",
			"2 pods deleted, 1 volume attachment released",
			"Forced detach:    freed from a CSI attacher that kept failing to detach them, never unpublished (the storage system may still publish their volumes to the node: check it there): csi-held (pv-held)",
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
	// Under a policy with workloads, the node's pods by the controller's rule, line by line.
	workloads := "  Workloads:        a failed node is fenced only for pods on ReadWriteOnce volumes or StatefulSet pods " +
		"(a fence request or the node's deletion is fenced whatever it holds)"
	lines := map[string][]string{
		"explain-workloads": {workloads,
			"  Pods:             1 of the 2 pods on explain-workloads needs fencing under policy explain-workloads:",
			"    default/explain-postgres-0: StatefulSet pod with ReadWriteOnce volume data-explain-postgres-0",
			"  Storm guard:      StormGuardActive not reported (the controller has not written it: is it running?); 1 of 5 nodes unhealthy, at most 2 may be (maxUnhealthy 40% (default))"},
		"explain-stateless": {workloads,
			"  Pods:             no pod on explain-stateless needs fencing under policy explain-workloads: its one pod is not one the policy fences for",
			"  Storm guard:      StormGuardActive not reported (the controller has not written it: is it running?); 1 of 5 nodes unhealthy, at most 2 may be (maxUnhealthy 40% (default))"},
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
			wantLines(t, "explain "+tc.node, r.out, lines[tc.node]...)
			if t.Failed() || tc.node == "explain-held" {
				t.Logf("explain %s:\n%s", tc.node, r.out)
			}
		})
	}

	t.Run("pods sorted and bounded", func(t *testing.T) {
		r := runCLI(t, c, "", "explain", "explain-many")
		if r.code != exitOK {
			t.Fatalf("explain explain-many: %s", r)
		}
		want := []string{"  Pods:             12 of the 12 pods on explain-many need fencing under policy explain-workloads:"}
		for i := range maxPodsShown {
			want = append(want, fmt.Sprintf("    default/explain-many-%02d: StatefulSet pod", i))
		}
		wantLines(t, "explain explain-many", r.out, append(want, "    and 2 more")...)
		if strings.Contains(r.out, "explain-many-10") || strings.Contains(r.out, "explain-many-11") {
			t.Errorf("explain lists more than %d pods:\n%s", maxPodsShown, r.out)
		}
		if t.Failed() {
			t.Logf("explain explain-many:\n%s", r.out)
		}
	})
	t.Run("pods it may not list", func(t *testing.T) {
		grant(t, c, "explain-nopods",
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
			rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get"}},
			rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"fencingpolicies", "nodefences"}, Verbs: []string{"get", "list"}})
		r := runCLI(t, as(t, cl, "explain-nopods"), "", "explain", "explain-workloads")
		if r.code != exitOK {
			t.Fatalf("explain without the right to list pods: %s", r)
		}
		wantContains(t, "explain", r.out, "Pods:             could not be read: permission missing: you may not list pods cluster-wide")
		if got, want := lastLine(r.out), "explain-workloads looks failed (Dead: dead: agent heartbeat lost; API: Lease not renewed for 45s (threshold 20s)): "+
			"the controller fences it only for pods on ReadWriteOnce volumes or StatefulSet pods, and leaves it to Kubernetes if it holds none "+
			"(its pods could not be read here) (no NodeFence yet)"; got != want {
			t.Errorf("verdict:\n got %s\nwant %s", got, want)
		}
	})

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
	}, func() *v1alpha1.FencingPolicyStatus {
		s := dead("explain-dry")
		s.Conditions = []metav1.Condition{condition(v1alpha1.ConditionInvalidSpec, metav1.ConditionTrue, v1alpha1.ReasonSelfFenceTimeoutTooShort,
			"method self: its timeout (1m0s) does not exceed selfFence.safeAfter (1m0s)")}
		return s
	}())
	makeNode(t, c, nodeSpec{name: "explain-dry", labels: label("dry")})

	// workloads: listed Dead under a policy that fences only for StatefulSet pods and pods on
	// ReadWriteOnce volumes; explain-workloads holds one, explain-stateless only a Deployment's
	// pod on a ReadWriteMany volume, explain-many twelve StatefulSet pods.
	both := dead("explain-workloads")
	both.Unhealthy = append(both.Unhealthy, v1alpha1.NodeVerdict{Node: "explain-stateless", Verdict: "Dead", Reason: both.Unhealthy[0].Reason})
	makePolicy(t, c, "explain-workloads", label("workloads"), func(s *v1alpha1.FencingPolicySpec) {
		s.Workloads = &v1alpha1.Workloads{StatefulSets: true, RWOVolumes: true}
	}, both)
	for _, n := range []string{"explain-workloads", "explain-stateless", "explain-many"} {
		makeNode(t, c, nodeSpec{name: n, labels: label("workloads")})
	}
	makeClaim(t, c, "data-explain-postgres-0", corev1.ReadWriteOnce)
	makeClaim(t, c, "explain-shared", corev1.ReadWriteMany)
	makePod(t, c, "explain-workloads", "explain-web-5d8f9-q7x2z", "ReplicaSet")
	makePod(t, c, "explain-workloads", "explain-postgres-0", "StatefulSet", "data-explain-postgres-0")
	makePod(t, c, "explain-stateless", "explain-api-7c6d9-m4n8p", "ReplicaSet", "explain-shared")
	for i := 11; i >= 0; i-- { // listed by name, whatever the order of creation
		makePod(t, c, "explain-many", fmt.Sprintf("explain-many-%02d", i), "StatefulSet")
	}

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
		nf.Status.BootID, nf.Status.ConfirmedBootIDs, nf.Status.AgentBootID = "boot-1", []string{"boot-mid"}, "boot-mid"
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

// makeClaim creates a PersistentVolumeClaim of namespace default with the access mode.
func makeClaim(t *testing.T, c client.Client, name string, mode corev1.PersistentVolumeAccessMode) {
	t.Helper()
	create(t, c, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}})
}

// makePod creates a pod of namespace default bound to node, controlled by an apps/v1 owner of
// kind, with claims.
func makePod(t *testing.T, c client.Client, node, name, kind string, claims ...string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name + "-owner", UID: "0b7e3b52-explain", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "main"}}}}
	for _, cl := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: cl, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: cl}}})
	}
	create(t, c, p)
}

// wantLines fails unless text holds the lines, whole and one after the other.
func wantLines(t *testing.T, what, text string, lines ...string) {
	t.Helper()
	if len(lines) > 0 && !strings.Contains("\n"+text, "\n"+strings.Join(lines, "\n")+"\n") {
		t.Errorf("%s does not hold these lines:\n%s\n\n%s", what, strings.Join(lines, "\n"), text)
	}
}

// TestLeaseTextNamesTheRaisedTimeout: under a policy's 5s, a node whose kubelet renews every 10s
// is judged as the controller judges it, with 20s, and the line says so.
func TestLeaseTextNamesTheRaisedTimeout(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	renew := metav1.NewMicroTime(now.Add(-7 * time.Second))
	p := &v1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "short"}}
	p.Spec.Detection.LeaseTimeout = &metav1.Duration{Duration: 5 * time.Second}
	e := &explanation{name: "n1", now: now, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		lease:   &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &renew}},
		matches: []policyMatch{{policy: p, matches: true}}}
	got := leaseText(e)
	if want := "leaseTimeout 5s (policy short; this node judged with 20s, 2 of its kubelet's renewal intervals): Healthy"; !strings.Contains(got, want) {
		t.Errorf("lease line %q lacks %q", got, want)
	}
}
