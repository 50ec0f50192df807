package palisade_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	"palisade.dev/palisade/cmd/palisade-controller/uninstall"
	"palisade.dev/palisade/detectors/sight"
	"palisade.dev/palisade/fencing"
)

// hookAnnotations are the annotations of every object of the uninstall cleanup but the Job's
// log policy.
var hookAnnotations = map[string]string{
	"helm.sh/hook":               "pre-delete",
	"helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
}

// uninstallJob is the rendered cleanup Job, or nil.
func uninstallJob(t *testing.T, ms []manifest) *batchv1.Job {
	t.Helper()
	jobs := find(ms, "Job")
	if len(jobs) == 0 {
		return nil
	}
	if len(jobs) > 1 {
		t.Fatalf("want 1 Job, got %d", len(jobs))
	}
	j := &batchv1.Job{}
	decodeStrict(t, jobs[0], j)
	return j
}

// clusterScope keys the cleanup's ClusterRole in uninstallRules.
const clusterScope = "(cluster)"

// uninstallRules are the rules of the cleanup's Roles by namespace (its ClusterRole's under
// clusterScope), and the subjects of their bindings.
func uninstallRules(t *testing.T, ms []manifest) (map[string][]rbacv1.PolicyRule, []rbacv1.Subject) {
	t.Helper()
	rules := map[string][]rbacv1.PolicyRule{}
	var subjects []rbacv1.Subject
	for _, m := range slices.Concat(find(ms, "Role"), find(ms, "RoleBinding"), find(ms, "ClusterRole"), find(ms, "ClusterRoleBinding")) {
		if m.name != "palisade-uninstall" {
			continue
		}
		var obj struct {
			Metadata struct{ Annotations map[string]string }
			Rules    []rbacv1.PolicyRule
			Subjects []rbacv1.Subject
		}
		decodeLoose(t, m, &obj)
		delete(obj.Metadata.Annotations, "helm.sh/hook-weight")
		if diff := cmp.Diff(hookAnnotations, obj.Metadata.Annotations); diff != "" {
			t.Errorf("%s %s/%s: annotations (-want +got):\n%s", m.kind, m.namespace, m.name, diff)
		}
		switch m.kind {
		case "Role":
			rules[m.namespace] = obj.Rules
		case "ClusterRole":
			rules[clusterScope] = obj.Rules
		default:
			subjects = append(subjects, obj.Subjects...)
		}
	}
	return rules, subjects
}

// TestUninstallHook: helm uninstall first runs the cleanup Job, a pre-delete hook deleted once
// it succeeded, whose log Helm shows; it runs `palisade-controller uninstall` from the
// controller's image under the controller's ServiceAccount, with arguments that name what the
// controller created in this release (parsed by the command's own parser), with resources and
// without the controller's selector labels. Its Roles grant, by name and only while it runs,
// what the controller's RBAC lacks: the Deployment's scale, and deleting the CA Secret and
// ConfigMap and the Leases named by the controller's constants.
func TestUninstallHook(t *testing.T) {
	ms, err := render(t, nil)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	job := uninstallJob(t, ms)
	if job == nil {
		t.Fatal("no uninstall Job")
	}
	wantAnns := map[string]string{"helm.sh/hook-weight": "0", "helm.sh/hook-output-log-policy": "hook-succeeded,hook-failed"}
	for k, v := range hookAnnotations {
		wantAnns[k] = v
	}
	if diff := cmp.Diff(wantAnns, job.Annotations); diff != "" {
		t.Errorf("Job annotations (-want +got):\n%s", diff)
	}
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	ctl := deployment(t, ms)
	if pod.ServiceAccountName != "palisade" || c.Image != ctl.Spec.Template.Spec.Containers[0].Image || !cmp.Equal(c.Command, []string{"palisade-controller"}) ||
		len(c.Args) == 0 || c.Args[0] != "uninstall" || pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("Job: serviceAccount %q, image %q, command %q, args %q, restartPolicy %q", pod.ServiceAccountName, c.Image, c.Command, c.Args, pod.RestartPolicy)
	}
	got, err := uninstall.ParseFlags(c.Args[1:])
	if err != nil {
		t.Fatalf("palisade-controller uninstall refuses the Job's arguments %q: %v", c.Args, err)
	}
	want := uninstall.Options{Namespace: namespace, Deployment: "palisade", StopTimeout: 90 * time.Second,
		LeaderElectionNamespace: namespace, AgentCASecret: "palisade-agent-ca", AgentCAConfigMap: "palisade-agent-ca", AgentSigner: "palisade.dev/agent"}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(uninstall.Options{}, "Log")); diff != "" {
		t.Errorf("the Job's arguments (-want +got):\n%s", diff)
	}
	if r := c.Resources; r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("Job resources %+v lack a CPU or memory request or a memory limit", r)
	}
	if sel := ctl.Spec.Selector.MatchLabels; labels.SelectorFromSet(sel).Matches(labels.Set(job.Spec.Template.Labels)) {
		t.Errorf("the controller's selector %v matches the Job's pod: the cleanup would wait for itself", sel)
	}

	rules, subjects := uninstallRules(t, ms)
	leases := func(names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: names, Verbs: []string{"delete"}}
	}
	wantRules := map[string][]rbacv1.PolicyRule{
		namespace: {
			{APIGroups: []string{"apps"}, Resources: []string{"deployments/scale"}, ResourceNames: []string{"palisade"}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, ResourceNames: []string{"palisade-agent-ca"}, Verbs: []string{"delete"}},
			leases(fencing.TokenLeaseName, app.LeaderElectionID),
		},
		"kube-node-lease": {leases(sight.CanaryName)},
		// The agents' CSRs, whose names are the API server's: delete only, listed with the
		// controller's own ClusterRole.
		clusterScope: {{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"delete"}}},
	}
	if diff := cmp.Diff(wantRules, rules); diff != "" {
		t.Errorf("the cleanup's Roles (-want +got):\n%s", diff)
	}
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "palisade", Namespace: namespace}
	wantSubjects := []rbacv1.Subject{sa, sa, sa}
	if diff := cmp.Diff(wantSubjects, subjects); diff != "" {
		t.Errorf("the cleanup's RoleBindings' subjects (-want +got):\n%s", diff)
	}
}

// TestUninstallHookValues: the cleanup follows the values — off, without the agent (no CA to
// delete), without leader election (no Lease), with the leader-election Lease elsewhere, without
// RBAC, with another ServiceAccount.
func TestUninstallHookValues(t *testing.T) {
	tests := []struct {
		name     string
		vals     map[string]any
		job      bool
		argsLack []string // prefixes
		argsHave []string
		roleNS   []string
		sa       string
	}{
		{name: "off", vals: map[string]any{"uninstallCleanup": map[string]any{"enabled": false}}},
		{name: "without the agent", vals: map[string]any{"agent": map[string]any{"enabled": false}}, job: true,
			argsLack: []string{"--agent-ca-", "--agent-signer"}, roleNS: []string{"kube-node-lease", namespace}, sa: "palisade"},
		{name: "without leader election", vals: map[string]any{"replicaCount": 1, "leaderElection": map[string]any{"enabled": false}}, job: true,
			argsLack: []string{"--leader-election-namespace"}, roleNS: []string{clusterScope, "kube-node-lease", namespace}, sa: "palisade"},
		{name: "leader election elsewhere", vals: map[string]any{"leaderElection": map[string]any{"namespace": "elections"}}, job: true,
			argsHave: []string{"--leader-election-namespace=elections"}, roleNS: []string{clusterScope, "elections", "kube-node-lease", namespace}, sa: "palisade"},
		{name: "without RBAC", vals: map[string]any{"rbac": map[string]any{"create": false}, "serviceAccount": map[string]any{"name": "fencer"}}, job: true, sa: "fencer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := render(t, tt.vals)
			if err != nil {
				t.Fatalf("rendering: %v", err)
			}
			job := uninstallJob(t, ms)
			if (job != nil) != tt.job {
				t.Fatalf("Job rendered: %v, want %v", job != nil, tt.job)
			}
			rules, _ := uninstallRules(t, ms)
			var ns []string
			for n := range rules {
				ns = append(ns, n)
			}
			if diff := cmp.Diff(tt.roleNS, ns, cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("namespaces of the cleanup's Roles (-want +got):\n%s", diff)
			}
			if job == nil {
				return
			}
			pod := job.Spec.Template.Spec
			args := strings.Join(pod.Containers[0].Args, " ")
			for _, a := range tt.argsLack {
				if strings.Contains(args, a) {
					t.Errorf("args %q hold %s", args, a)
				}
			}
			for _, a := range tt.argsHave {
				if !strings.Contains(args, a) {
					t.Errorf("args %q lack %s", args, a)
				}
			}
			if pod.ServiceAccountName != tt.sa {
				t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, tt.sa)
			}
			if _, err := uninstall.ParseFlags(pod.Containers[0].Args[1:]); err != nil {
				t.Errorf("palisade-controller uninstall refuses %q: %v", args, err)
			}
			for n, rs := range rules {
				if n == clusterScope {
					continue // CSR names are the API server's
				}
				for _, r := range rs {
					if len(r.ResourceNames) == 0 {
						t.Errorf("Role %s/palisade-uninstall: a rule without resourceNames: %+v", n, r)
					}
				}
			}
		})
	}
}
