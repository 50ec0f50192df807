package palisade_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

const namespace = "palisade-system"

// manifest is one rendered object: its template, its kind and its YAML.
type manifest struct {
	template, kind, name, namespace string
	doc                             []byte
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(".")
	if err != nil {
		t.Fatalf("loading chart: %v", err)
	}
	return ch
}

// render renders the chart as "helm template -n palisade-system palisade" would with vals.
func render(t *testing.T, vals map[string]any) ([]manifest, error) {
	t.Helper()
	ch := loadChart(t)
	out, err := renderFiles(t, ch, vals)
	if err != nil {
		return nil, err
	}
	var ms []manifest
	for name, text := range out {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt, _helpers.tpl
		}
		ms = append(ms, splitManifests(t, name, text)...)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].kind+"/"+ms[i].name < ms[j].kind+"/"+ms[j].name })
	return ms, nil
}

// renderFiles renders every template of ch with vals, after Helm's own checks of the values
// against values.schema.json (an error, as helm install would give).
func renderFiles(t *testing.T, ch *chart.Chart, vals map[string]any) (map[string]string, error) {
	t.Helper()
	opts := chartutil.ReleaseOptions{Name: "palisade", Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(ch, vals, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, rv)
}

// splitManifests parses every YAML document of a rendered template; each must have an
// apiVersion, a kind and a name.
func splitManifests(t *testing.T, template, text string) []manifest {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	var ms []manifest
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return ms
		}
		if err != nil {
			t.Fatalf("%s: reading YAML: %v", template, err)
		}
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%s: parsing YAML: %v\n%s", template, err, doc)
		}
		if obj.APIVersion == "" && obj.Kind == "" && len(bytes.TrimSpace(doc)) > 0 && !onlyComments(doc) {
			t.Fatalf("%s: document without apiVersion and kind:\n%s", template, doc)
		}
		if obj.Kind == "" {
			continue // empty document (a disabled template)
		}
		if obj.APIVersion == "" || obj.Metadata.Name == "" {
			t.Fatalf("%s: %s without apiVersion or name:\n%s", template, obj.Kind, doc)
		}
		ms = append(ms, manifest{template, obj.Kind, obj.Metadata.Name, obj.Metadata.Namespace, doc})
	}
}

func onlyComments(doc []byte) bool {
	for _, l := range strings.Split(string(doc), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// decodeStrict decodes a manifest into its typed object, failing on unknown fields (a field at
// the wrong indentation).
func decodeStrict(t *testing.T, m manifest, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(m.doc, into); err != nil {
		t.Fatalf("%s: decoding %s %s: %v\n%s", m.template, m.kind, m.name, err, m.doc)
	}
}

func find(ms []manifest, kind string) []manifest {
	var out []manifest
	for _, m := range ms {
		if m.kind == kind {
			out = append(out, m)
		}
	}
	return out
}

func kinds(ms []manifest) []string {
	var out []string
	for _, m := range ms {
		ns := m.namespace
		if ns == "" {
			ns = "-"
		}
		out = append(out, m.kind+" "+ns+"/"+m.name)
	}
	return out
}

func TestRenderObjects(t *testing.T) {
	tests := []struct {
		name string
		vals map[string]any
		want []string
	}{{
		name: "defaults",
		want: []string{
			"ClusterRole -/palisade",
			"ClusterRole -/palisade-agent",
			"ClusterRole -/palisade-uninstall",
			"ClusterRoleBinding -/palisade",
			"ClusterRoleBinding -/palisade-agent",
			"ClusterRoleBinding -/palisade-uninstall",
			"CustomResourceDefinition -/fencingpolicies.fencing.palisade.dev",
			"CustomResourceDefinition -/nodefences.fencing.palisade.dev",
			"DaemonSet palisade-system/palisade-agent",
			"Deployment palisade-system/palisade",
			"Job palisade-system/palisade-uninstall",
			"Pod palisade-system/palisade-test",
			"PodDisruptionBudget palisade-system/palisade",
			"Role kube-node-lease/palisade-node-leases",
			"Role kube-node-lease/palisade-uninstall",
			"Role palisade-system/palisade-agent",
			"Role palisade-system/palisade-agent-pki",
			"Role palisade-system/palisade-bmc-secrets",
			"Role palisade-system/palisade-fencing-token",
			"Role palisade-system/palisade-leader-election",
			"Role palisade-system/palisade-uninstall",
			"RoleBinding kube-node-lease/palisade-node-leases",
			"RoleBinding kube-node-lease/palisade-uninstall",
			"RoleBinding palisade-system/palisade-agent",
			"RoleBinding palisade-system/palisade-agent-pki",
			"RoleBinding palisade-system/palisade-bmc-secrets",
			"RoleBinding palisade-system/palisade-fencing-token",
			"RoleBinding palisade-system/palisade-leader-election",
			"RoleBinding palisade-system/palisade-uninstall",
			"Service palisade-system/palisade-agent-heartbeat",
			"Service palisade-system/palisade-metrics",
			"ServiceAccount palisade-system/palisade",
			"ServiceAccount palisade-system/palisade-agent",
			"ValidatingAdmissionPolicy -/palisade-agent-nodefence-answers",
			"ValidatingAdmissionPolicy -/palisade-fence-requests",
			"ValidatingAdmissionPolicyBinding -/palisade-agent-nodefence-answers",
			"ValidatingAdmissionPolicyBinding -/palisade-fence-requests",
		},
	}, {
		name: "without the agent",
		vals: map[string]any{"agent": map[string]any{"enabled": false}},
		want: []string{
			"ClusterRole -/palisade",
			"ClusterRoleBinding -/palisade",
			"CustomResourceDefinition -/fencingpolicies.fencing.palisade.dev",
			"CustomResourceDefinition -/nodefences.fencing.palisade.dev",
			"Deployment palisade-system/palisade",
			"Job palisade-system/palisade-uninstall",
			"Pod palisade-system/palisade-test",
			"PodDisruptionBudget palisade-system/palisade",
			"Role kube-node-lease/palisade-node-leases",
			"Role kube-node-lease/palisade-uninstall",
			"Role palisade-system/palisade-bmc-secrets",
			"Role palisade-system/palisade-fencing-token",
			"Role palisade-system/palisade-leader-election",
			"Role palisade-system/palisade-uninstall",
			"RoleBinding kube-node-lease/palisade-node-leases",
			"RoleBinding kube-node-lease/palisade-uninstall",
			"RoleBinding palisade-system/palisade-bmc-secrets",
			"RoleBinding palisade-system/palisade-fencing-token",
			"RoleBinding palisade-system/palisade-leader-election",
			"RoleBinding palisade-system/palisade-uninstall",
			"Service palisade-system/palisade-metrics",
			"ServiceAccount palisade-system/palisade",
			"ValidatingAdmissionPolicy -/palisade-fence-requests",
			"ValidatingAdmissionPolicyBinding -/palisade-fence-requests",
		},
	}, {
		name: "single replica without leader election, metrics or RBAC",
		vals: map[string]any{
			"replicaCount":   1,
			"leaderElection": map[string]any{"enabled": false},
			"metrics":        map[string]any{"enabled": false},
			"rbac":           map[string]any{"create": false},
		},
		want: []string{
			"CustomResourceDefinition -/fencingpolicies.fencing.palisade.dev",
			"CustomResourceDefinition -/nodefences.fencing.palisade.dev",
			"DaemonSet palisade-system/palisade-agent",
			"Deployment palisade-system/palisade",
			"Job palisade-system/palisade-uninstall",
			"Service palisade-system/palisade-agent-heartbeat",
			"ServiceAccount palisade-system/palisade",
			"ServiceAccount palisade-system/palisade-agent",
			"ValidatingAdmissionPolicy -/palisade-fence-requests",
			"ValidatingAdmissionPolicyBinding -/palisade-fence-requests",
		},
	}, {
		name: "secrets in more namespaces",
		vals: map[string]any{"bmcSecretNamespaces": []any{"bmc", namespace, "racks"}, "agent": map[string]any{"enabled": false}},
		want: []string{
			"ClusterRole -/palisade",
			"ClusterRoleBinding -/palisade",
			"CustomResourceDefinition -/fencingpolicies.fencing.palisade.dev",
			"CustomResourceDefinition -/nodefences.fencing.palisade.dev",
			"Deployment palisade-system/palisade",
			"Job palisade-system/palisade-uninstall",
			"Pod palisade-system/palisade-test",
			"PodDisruptionBudget palisade-system/palisade",
			"Role bmc/palisade-bmc-secrets",
			"Role kube-node-lease/palisade-node-leases",
			"Role kube-node-lease/palisade-uninstall",
			"Role palisade-system/palisade-bmc-secrets",
			"Role palisade-system/palisade-fencing-token",
			"Role palisade-system/palisade-leader-election",
			"Role palisade-system/palisade-uninstall",
			"Role racks/palisade-bmc-secrets",
			"RoleBinding bmc/palisade-bmc-secrets",
			"RoleBinding kube-node-lease/palisade-node-leases",
			"RoleBinding kube-node-lease/palisade-uninstall",
			"RoleBinding palisade-system/palisade-bmc-secrets",
			"RoleBinding palisade-system/palisade-fencing-token",
			"RoleBinding palisade-system/palisade-leader-election",
			"RoleBinding palisade-system/palisade-uninstall",
			"RoleBinding racks/palisade-bmc-secrets",
			"Service palisade-system/palisade-metrics",
			"ServiceAccount palisade-system/palisade",
			"ValidatingAdmissionPolicy -/palisade-fence-requests",
			"ValidatingAdmissionPolicyBinding -/palisade-fence-requests",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := render(t, tt.vals)
			if err != nil {
				t.Fatalf("rendering: %v", err)
			}
			got := kinds(ms)
			sort.Strings(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rendered objects (-want +got):\n%s", diff)
			}
			decodeAll(t, ms)
		})
	}
}

// decodeAll decodes every rendered object strictly into its Kubernetes type.
func decodeAll(t *testing.T, ms []manifest) {
	t.Helper()
	for _, m := range ms {
		var into any
		switch m.kind {
		case "Deployment":
			into = &appsv1.Deployment{}
		case "DaemonSet":
			into = &appsv1.DaemonSet{}
		case "Service":
			into = &corev1.Service{}
		case "ServiceAccount":
			into = &corev1.ServiceAccount{}
		case "PodDisruptionBudget":
			into = &policyv1.PodDisruptionBudget{}
		case "ClusterRole":
			into = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			into = &rbacv1.ClusterRoleBinding{}
		case "Role":
			into = &rbacv1.Role{}
		case "RoleBinding":
			into = &rbacv1.RoleBinding{}
		case "ValidatingAdmissionPolicy":
			into = &admissionregistrationv1.ValidatingAdmissionPolicy{}
		case "ValidatingAdmissionPolicyBinding":
			into = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		case "Pod":
			into = &corev1.Pod{}
		case "CustomResourceDefinition":
			into = &apiextensionsv1.CustomResourceDefinition{}
		case "Job":
			into = &batchv1.Job{}
		case "ConfigMap":
			into = &corev1.ConfigMap{}
		case "ServiceMonitor":
			into = &serviceMonitor{}
		case "PrometheusRule":
			into = &prometheusRule{}
		default:
			t.Fatalf("%s: unexpected kind %s", m.template, m.kind)
		}
		decodeStrict(t, m, into)
	}
}

func deployment(t *testing.T, ms []manifest) *appsv1.Deployment {
	t.Helper()
	ds := find(ms, "Deployment")
	if len(ds) != 1 {
		t.Fatalf("want 1 Deployment, got %d", len(ds))
	}
	d := &appsv1.Deployment{}
	decodeStrict(t, ds[0], d)
	return d
}

func TestDeployment(t *testing.T) {
	ms, err := render(t, nil)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	d := deployment(t, ms)
	if got := *d.Spec.Replicas; got != 2 {
		t.Errorf("replicas = %d, want 2", got)
	}
	pod := d.Spec.Template.Spec
	if pod.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName = %q, want system-cluster-critical", pod.PriorityClassName)
	}
	if len(pod.TopologySpreadConstraints) == 0 || pod.TopologySpreadConstraints[0].LabelSelector == nil {
		t.Errorf("want topology spread constraints with a label selector, got %+v", pod.TopologySpreadConstraints)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("want 1 container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if !hasArg(c.Args, "--leader-elect=true") {
		t.Errorf("args %q lack --leader-elect=true", c.Args)
	}
	if !hasArg(c.Args, "--health-probe-bind-address=:8081") || !hasArg(c.Args, "--metrics-bind-address=:8080") {
		t.Errorf("args %q lack the probe or metrics address", c.Args)
	}
	if !hasArg(c.Args, "--fence-concurrency=10") {
		t.Errorf("args %q lack --fence-concurrency=10 (controller.fenceConcurrency)", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE not from metadata.namespace: %+v", c.Env)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		path := map[string]string{"liveness": "/healthz", "readiness": "/readyz", "startup": "/healthz"}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "probes" {
			t.Errorf("%s probe not %s on the probe port: %+v", name, path, p)
		}
	}
	// The startup probe covers the controller's wait for an API server that does not answer at
	// start (app.startWait, 2 minutes), or the kubelet kills it meanwhile.
	if p := c.StartupProbe; p == nil || time.Duration(p.PeriodSeconds*p.FailureThreshold)*time.Second < 2*time.Minute {
		t.Errorf("startup probe %+v: want it to allow at least 2 minutes", p)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!cmp.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext not locked down: %+v", sc)
	}
}

func hasArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

func TestLeaderElectionRequiredForReplicas(t *testing.T) {
	_, err := render(t, map[string]any{"leaderElection": map[string]any{"enabled": false}})
	if err == nil || !strings.Contains(err.Error(), "leaderElection.enabled") {
		t.Fatalf("rendering 2 replicas without leader election: err = %v, want a refusal", err)
	}
	ms, err := render(t, map[string]any{"replicaCount": 1, "leaderElection": map[string]any{"enabled": false}})
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	if c := deployment(t, ms).Spec.Template.Spec.Containers[0]; !hasArg(c.Args, "--leader-elect=false") {
		t.Errorf("args %q lack --leader-elect=false", c.Args)
	}
}

// TestRBACIsNarrow checks that no rule grants a wildcard, that the ClusterRole grants nothing
// on Secrets or Leases (namespaced Roles do), and that Secrets are only ever readable with get:
// the BMC Secrets, and the agents' CA Secret by its name (which the controller may create, and
// the uninstall cleanup delete).
func TestRBACIsNarrow(t *testing.T) {
	ms, err := render(t, map[string]any{"bmcSecretNamespaces": []any{"bmc"}, "bmcSecretNames": []any{"bmc-credentials"}})
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	for _, m := range append(find(ms, "ClusterRole"), find(ms, "Role")...) {
		var r struct {
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal(m.doc, &r); err != nil {
			t.Fatalf("%s: %v", m.template, err)
		}
		for _, rule := range r.Rules {
			for _, s := range append(append(append([]string{}, rule.Verbs...), rule.Resources...), rule.APIGroups...) {
				if strings.Contains(s, "*") {
					t.Errorf("%s %s grants a wildcard: %+v", m.kind, m.name, rule)
				}
			}
			for _, res := range rule.Resources {
				if m.kind == "ClusterRole" && (res == "secrets" || res == "leases") {
					t.Errorf("ClusterRole grants %s cluster-wide: %+v", res, rule)
				}
				if res == "secrets" && m.name == "palisade-uninstall" {
					if !cmp.Equal(rule.Verbs, []string{"delete"}) || !cmp.Equal(rule.ResourceNames, []string{"palisade-agent-ca"}) {
						t.Errorf("Role %s/%s: want delete on the agents' CA Secret only, got %+v", m.namespace, m.name, rule)
					}
					continue
				}
				if res == "secrets" && m.name == "palisade-agent-pki" {
					if !cmp.Equal(rule.Verbs, []string{"create"}) && (!cmp.Equal(rule.Verbs, []string{"get"}) || !cmp.Equal(rule.ResourceNames, []string{"palisade-agent-ca"})) {
						t.Errorf("Role %s/%s: want create, or get on the agents' CA Secret only, got %+v", m.namespace, m.name, rule)
					}
					continue
				}
				if res == "secrets" && (!cmp.Equal(rule.Verbs, []string{"get"}) || !cmp.Equal(rule.ResourceNames, []string{"bmc-credentials"})) {
					t.Errorf("%s %s/%s: want get on the named Secrets only, got %+v", m.kind, m.namespace, m.name, rule)
				}
			}
		}
	}
}

// TestExamples decodes the example FencingPolicy strictly into the API type, so that a renamed
// field breaks the test, and checks the example Secret.
func TestExamples(t *testing.T) {
	read := func(name string) manifest {
		b, err := os.ReadFile(filepath.Join("examples", name))
		if err != nil {
			t.Fatal(err)
		}
		ms := splitManifests(t, name, string(b))
		if len(ms) != 1 {
			t.Fatalf("%s: want 1 object, got %d", name, len(ms))
		}
		return ms[0]
	}
	p := &v1alpha1.FencingPolicy{}
	decodeStrict(t, read("fencingpolicy.yaml"), p)
	ref := p.Spec.Methods[0].IPMI.CredentialsSecretRef
	s := &corev1.Secret{}
	decodeStrict(t, read("bmc-secret.yaml"), s)
	if got, want := ref, (v1alpha1.SecretReference{Namespace: s.Namespace, Name: s.Name}); got != want {
		t.Errorf("policy's credentialsSecretRef = %+v, want the example Secret %+v", got, want)
	}
	for _, k := range []string{"username", "password"} {
		if s.StringData[k] == "" {
			t.Errorf("example Secret lacks key %s", k)
		}
	}
	if got := p.Spec.StormGuard.MaxUnhealthy.String(); got != "40%" {
		t.Errorf("maxUnhealthy = %s, want 40%%", got)
	}
}
