package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/testbed"
)

// fence shows the plan of the policy the controller would use, asks, and sets the request only
// on yes; it refuses what the controller would not do, or would do other than asked.
func TestFence(t *testing.T) {
	cl := testCluster(t)
	c := cl.Client
	fenceScenarios(t, c)

	t.Run("yes", func(t *testing.T) {
		r := runCLI(t, c, "y\n", "fence", "fence-yes", "--reason", "  disk controller reports errors ")
		if r.code != exitOK {
			t.Fatalf("fence: %s", r)
		}
		t.Logf("fence fence-yes:\n%s", r.out)
		wantContains(t, "the plan", r.out,
			`Fence node fence-yes, reason "disk controller reports errors".`,
			"Policy: fence-a (nodeSelector palisade-cli-test=fence,pool=a); fence-b also selects the node, but the controller uses the first by name",
			"1. level both, all of:",
			"- stop (Executor, timeout 1m0s): the node's agent stops the kubelet",
			"- power (IPMI, timeout 30s): POWERS THE MACHINE OFF through its BMC over IPMI (BMC 10.0.0.5)",
			"2. ipmi2 (IPMI, timeout 1m0s): POWERS THE MACHINE OFF",
			"A power method (ipmi2, power) POWERS THE MACHINE OFF",
			"add the taint node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
			"force-delete the pods bound to fence-yes",
			"On fence-yes now: 1 pod, default/fence-db-0.",
			"Attached to fence-yes now: 1 volume attachment, PV pv-db-0 (policy fence-a does not release them).",
			"Recovery: fence-yes stays fenced until it is back (Ready) and clean",
			"Fence node fence-yes? [y/N] ",
			`fence requested: node fence-yes carries palisade.dev/fence-request="disk controller reports errors"`)
		if strings.Contains(r.out, "delete the node's VolumeAttachments") {
			t.Errorf("the plan releases attachments, which policy fence-a turns off:\n%s", r.out)
		}
		if i, j := strings.Index(r.out, "- power ("), strings.Index(r.out, "2. ipmi2"); i < 0 || j < i {
			t.Errorf("the level's second method is not taken with its first, before ipmi2:\n%s", r.out)
		}
		if got := annotations(t, c, "fence-yes")[v1alpha1.AnnotationFenceRequest]; got != "disk controller reports errors" {
			t.Errorf("fence request = %q, want the trimmed reason", got)
		}
	})

	for _, tc := range []struct{ name, node, stdin string }{{"no", "fence-no", "n\n"}, {"no answer", "fence-eof", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, c, tc.stdin, "fence", tc.node, "--reason", "maintenance")
			if r.code != exitError {
				t.Fatalf("fence answered %q: %s", tc.stdin, r)
			}
			wantContains(t, "the refusal", r.errOut, "node "+tc.node+" not fenced: not confirmed")
			if _, ok := annotations(t, c, tc.node)[v1alpha1.AnnotationFenceRequest]; ok {
				t.Errorf("node %s carries a fence request after the answer %q", tc.node, tc.stdin)
			}
		})
	}

	t.Run("--yes does not ask", func(t *testing.T) {
		r := runCLI(t, c, "", "--context", "", "fence", "--yes", "--reason=maintenance", "fence-y")
		if r.code != exitOK || strings.Contains(r.out, "[y/N]") {
			t.Fatalf("fence --yes: %s", r)
		}
		if got := annotations(t, c, "fence-y")[v1alpha1.AnnotationFenceRequest]; got != "maintenance" {
			t.Errorf("fence request = %q, want maintenance", got)
		}
	})

	t.Run("dry run allowed", func(t *testing.T) {
		r := runCLI(t, c, "y\n", "fence", "fence-dry", "--reason", "rehearsal", "--allow-dry-run")
		if r.code != exitOK {
			t.Fatalf("fence --allow-dry-run: %s", r)
		}
		wantContains(t, "the plan", r.out, "DRY RUN: policy fence-dry takes no step", "Record a dry-run fence of node fence-dry (nothing is fenced)? [y/N]")
	})

	refusals := []struct {
		name string
		args []string
		want string
	}{
		{"missing node", []string{"fence", "fence-nope", "--reason", "x"}, "node fence-nope does not exist"},
		{"no policy", []string{"fence", "fence-nopolicy", "--reason", "x"},
			"no FencingPolicy selects node fence-nopolicy (labels palisade-cli-test=fence,pool=none)"},
		{"dry run", []string{"fence", "fence-dry", "--reason", "x", "--yes"}, "policy fence-dry, which selects node fence-dry, is a dry run"},
		{"under way", []string{"fence", "fence-busy", "--reason", "x", "--yes"}, "node fence-busy is already being fenced: NodeFence fence-busy is Fencing"},
		{"failed", []string{"fence", "fence-failed", "--reason", "x", "--yes"},
			"node fence-failed has a failed NodeFence (BMCAuthFailed: the BMC refused the credentials): nothing was released. Fix the cause, then delete the NodeFence"},
		{"released", []string{"fence", "fence-released", "--reason", "x", "--yes"}, "node fence-released is already fenced: its NodeFence is Released"},
		{"no reason", []string{"fence", "fence-recovered", "--yes"}, "--reason is empty: it must say why the node is to be fenced"},
		{"blank reason", []string{"fence", "fence-recovered", "--reason", "   ", "--yes"}, "--reason is empty"},
		{"long reason", []string{"fence", "fence-recovered", "--reason", strings.Repeat("x", 257), "--yes"}, "--reason is 257 characters long; at most 256 are allowed"},
		{"control character", []string{"fence", "fence-recovered", "--reason", "bad\x07bell", "--yes"}, "--reason holds non-printable characters"},
		{"newline", []string{"fence", "fence-recovered", "--reason", "two\nlines", "--yes"}, "--reason holds non-printable characters"},
	}
	for _, tc := range refusals {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			r := runCLI(t, c, "y\n", tc.args...)
			if r.code != exitError {
				t.Fatalf("%s: %s", strings.Join(tc.args, " "), r)
			}
			wantContains(t, "the refusal", r.errOut, tc.want)
			if _, ok := annotations(t, c, "fence-recovered")[v1alpha1.AnnotationFenceRequest]; ok {
				t.Fatal("a refused request was set")
			}
		})
	}

	t.Run("a recovered fence does not stand in the way", func(t *testing.T) {
		r := runCLI(t, c, "", "fence", "fence-recovered", "--reason", strings.Repeat("é", 256), "--yes")
		if r.code != exitOK {
			t.Fatalf("fence of a recovered node, 256-character reason: %s", r)
		}
		wantContains(t, "the plan", r.out, "The node's previous fence (recovered) is replaced")
	})
}

// fenceScenarios creates TestFence's policies, nodes and fences: policies fence-a and fence-b
// select the pool a (fence-a's chain has a level split around another method), fence-dry is a
// dry run, and some nodes of pool a have fences in every phase.
func fenceScenarios(t *testing.T, c client.Client) {
	t.Helper()
	pool := map[string]string{"palisade-cli-test": "fence", "pool": "a"}
	// The chain as listed: the level "both" is split around ipmi2; the fence takes it whole first.
	makePolicy(t, c, "fence-a", pool, func(s *v1alpha1.FencingPolicySpec) {
		timeout := metav1.Duration{Duration: 30e9}
		power := ipmi("power", "both")
		power.Timeout = &timeout
		s.Methods = []v1alpha1.Method{executor("stop", "both"), ipmi("ipmi2", ""), power}
		s.Release.ReleaseAttachments = ptr.To(false)
	}, nil)
	makePolicy(t, c, "fence-b", pool, nil, nil) // selects the same nodes, later by name
	makePolicy(t, c, "fence-dry", map[string]string{"palisade-cli-test": "fence", "pool": "dry"},
		func(s *v1alpha1.FencingPolicySpec) { s.DryRun = true }, nil)
	for _, n := range []string{"fence-yes", "fence-no", "fence-eof", "fence-y", "fence-busy", "fence-failed", "fence-released", "fence-recovered"} {
		makeNode(t, c, nodeSpec{name: n, labels: pool, ready: corev1.ConditionTrue, bootID: "boot-1",
			annotations: map[string]string{v1alpha1.AnnotationBMCAddress: "10.0.0.5"}})
	}
	create(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fence-db-0"},
		Spec: corev1.PodSpec{NodeName: "fence-yes", Containers: []corev1.Container{{Name: "db", Image: "db"}}}})
	create(t, c, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "fence-va"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "csi.example.com", NodeName: "fence-yes",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-db-0")}}})
	makeNode(t, c, nodeSpec{name: "fence-dry", labels: map[string]string{"palisade-cli-test": "fence", "pool": "dry"}, ready: corev1.ConditionTrue})
	makeNode(t, c, nodeSpec{name: "fence-nopolicy", labels: map[string]string{"palisade-cli-test": "fence", "pool": "none"}, ready: corev1.ConditionTrue})
	makeFence(t, c, "fence-busy", "fence-a", func(nf *v1alpha1.NodeFence) {
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Method: "ipmi", Token: 3}
	})
	makeFence(t, c, "fence-failed", "fence-a", func(nf *v1alpha1.NodeFence) {
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFailed, Method: "ipmi", Token: 4, Conditions: []metav1.Condition{
			condition(v1alpha1.ConditionFenced, metav1.ConditionFalse, "BMCAuthFailed", "the BMC refused the credentials")}}
	})
	makeFence(t, c, "fence-released", "fence-a", released("BootIDUnchanged", "not rebooted"))
	makeFence(t, c, "fence-recovered", "fence-a", func(nf *v1alpha1.NodeFence) {
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRecovered, Method: "ipmi", Token: 5}
	})
}

// A fence request the cluster's admission policy refuses ends with the server's message, which
// says who may; RBAC that does not let the user patch Nodes is named as the missing permission.
func TestFenceRefusedByTheCluster(t *testing.T) {
	cl := testCluster(t)
	c := cl.Client
	sel := map[string]string{"palisade-cli-test": "admission"}
	makePolicy(t, c, "admission", sel, nil, nil)
	for _, n := range []string{"admission-1", "admission-2"} {
		makeNode(t, c, nodeSpec{name: n, labels: sel, ready: corev1.ConditionTrue})
	}
	read := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"fencingpolicies", "nodefences"}, Verbs: []string{"get", "list"}},
	}
	patch := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"patch"}}
	grant(t, c, "bob", append(read, patch)...)
	grant(t, c, "alice", append(read, patch)...)
	grant(t, c, "carol", read...)
	admitOnly(t, cl, "alice")
	bob, alice, carol := as(t, cl, "bob"), as(t, cl, "alice"), as(t, cl, "carol")

	r := runCLI(t, bob, "", "fence", "admission-1", "--reason", "bob tries", "--yes")
	if r.code != exitError {
		t.Fatalf("bob's fence: %s", r)
	}
	t.Logf("bob's fence:\n%s", r)
	wantContains(t, "the denial", r.errOut, "the cluster's admission policy refused the fence request",
		"user bob may not set or change palisade.dev/fence-request", "only users alice may")

	r = runCLI(t, carol, "", "fence", "admission-1", "--reason", "carol tries", "--yes")
	if r.code != exitError {
		t.Fatalf("carol's fence: %s", r)
	}
	wantContains(t, "the RBAC refusal", r.errOut, `permission missing: you may not patch nodes admission-1 cluster-wide`,
		`grants verb "patch" on resource "nodes" of API group "" (core)`, "kubectl auth can-i patch nodes")

	r = runCLI(t, alice, "", "fence", "admission-2", "--reason", "alice may", "--yes")
	if r.code != exitOK {
		t.Fatalf("alice's fence: %s", r)
	}
	if got := annotations(t, c, "admission-2")[v1alpha1.AnnotationFenceRequest]; got != "alice may" {
		t.Errorf("fence request = %q, want alice's", got)
	}
	if _, ok := annotations(t, c, "admission-1")[v1alpha1.AnnotationFenceRequest]; ok {
		t.Error("a denied request was set")
	}
}

// admitOnly installs a ValidatingAdmissionPolicy like the chart's: only user (and the test
// bed's admin, in system:masters) may set or change a fence or unfence request. It returns
// once the API server enforces it.
func admitOnly(t *testing.T, cl *testbed.Cluster, user string) {
	c := cl.Client
	t.Helper()
	const name = "palisade-cli-test-fence-requests"
	changed := func(key string) string {
		return "'" + key + "' in variables.anns && (!('" + key + "' in variables.oldAnns) || variables.oldAnns['" + key + "'] != variables.anns['" + key + "'])"
	}
	allowed := "request.userInfo.username == '" + user + "' || (has(request.userInfo.groups) && 'system:masters' in request.userInfo.groups)"
	deny := func(key, why string) admissionregistrationv1.Validation {
		return admissionregistrationv1.Validation{
			Expression:        "!(" + changed(key) + ") || " + allowed,
			MessageExpression: "'user ' + request.userInfo.username + ' may not set or change " + key + " (" + why + "): only users " + user + " may'",
			Reason:            ptr.To(metav1.StatusReasonForbidden),
		}
	}
	create(t, c, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes"}},
				}}}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "anns", Expression: "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
				{Name: "oldAnns", Expression: "oldObject != null && has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}"},
			},
			Validations: []admissionregistrationv1.Validation{
				deny(v1alpha1.AnnotationFenceRequest, "a fence request powers the machine off"),
				deny(v1alpha1.AnnotationUnfenceRequest, "it confirms a fenced node clean and gives it back to the cluster"),
			},
		},
	})
	create(t, c, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	})
	// The API server loads admission policies asynchronously: wait until a dry-run request by
	// a user who may patch Nodes, but not set requests, is denied by it.
	grant(t, c, "probe", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "patch"}})
	probe := as(t, cl, "probe")
	eventually(t, "waiting for the admission policy to be enforced", func() error {
		var nodes corev1.NodeList
		if err := probe.List(context.Background(), &nodes); err != nil || len(nodes.Items) == 0 {
			return fmt.Errorf("listing nodes: %v (%d)", err, len(nodes.Items))
		}
		patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationFenceRequest + `":"probe"}}}`)
		err := probe.Patch(context.Background(), &nodes.Items[0], client.RawPatch(types.MergePatchType, patch), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "may not set or change") {
			return fmt.Errorf("a dry-run request by user probe: %v, want a denial", err)
		}
		return nil
	})
}
