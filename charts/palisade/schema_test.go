package palisade_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// schemaError is how Helm reports values that values.schema.json refuses.
const schemaError = "values don't meet the specifications of the schema"

// TestSchemaAccepts renders the default values, every values file in examples/ (the other
// files there are API objects, which TestExamples decodes), the production example in
// values.yaml's header, and values a user may well write: Helm validates each against
// values.schema.json first.
func TestSchemaAccepts(t *testing.T) {
	cases := map[string]map[string]any{
		"defaults": nil,
		"values from --set": {
			"agent":               map[string]any{"selfFenceAfter": 0, "maxUnavailable": 1, "kubeletPort": 0, "criEndpoint": ""},
			"podDisruptionBudget": map[string]any{"minAvailable": "50%"},
			"global":              map[string]any{"imageRegistry": "registry.example.com"},
		},
		"values.yaml's header example": headerExample(t),
	}
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	values := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var vals map[string]any
		if err := yaml.Unmarshal(b, &vals); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if vals["kind"] != nil && vals["apiVersion"] != nil {
			continue // an API object
		}
		cases[f] = vals
		values++
	}
	if values < 2 {
		t.Errorf("found %d values files in examples/, want the production and monitoring ones", values)
	}
	for name, vals := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := render(t, vals); err != nil {
				t.Errorf("rendering: %v", err)
			}
		})
	}
}

// headerExample is the values of the "helm install ... -f - <<'VALUES'" example in the
// comment at the top of values.yaml.
func headerExample(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		l, ok := strings.CutPrefix(l, "#   ")
		switch {
		case !ok && in:
			t.Fatal("values.yaml's header example does not end with VALUES")
		case !ok:
		case strings.HasSuffix(l, "<<'VALUES'"):
			in = true
		case l == "VALUES":
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(strings.Join(lines, "\n")), &vals); err != nil || len(vals) == 0 {
				t.Fatalf("values.yaml's header example: %v (%d values)", err, len(vals))
			}
			return vals
		case in:
			lines = append(lines, l)
		}
	}
	t.Fatal("no example in values.yaml's header")
	return nil
}

// TestSchemaRefuses: a typo in a key, at the top or inside one of the chart's own objects, a
// wrong type, a value outside an enum and a malformed duration, path or name all fail with
// Helm's schema error naming the value, rather than being ignored or failing later.
func TestSchemaRefuses(t *testing.T) {
	tests := []struct {
		name string
		vals map[string]any
		want string // in the error
	}{
		{"top-level typo", map[string]any{"replicaCont": 3}, "replicaCont"},
		{"typo in metrics", map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enable": true}}}, "enable"},
		{"typo in agent", map[string]any{"agent": map[string]any{"selfFenceAftr": "30s"}}, "selfFenceAftr"},
		{"typo in resources", map[string]any{"resources": map[string]any{"request": map[string]any{"cpu": "1"}}}, "request"},
		{"typo in a toleration", map[string]any{"tolerations": []any{map[string]any{"key": "k", "operater": "Exists"}}}, "operater"},
		{"string for an integer", map[string]any{"replicaCount": "two"}, "/replicaCount"},
		{"string for a boolean", map[string]any{"rbac": map[string]any{"create": "yes"}}, "/rbac/create"},
		{"list for a map", map[string]any{"nodeSelector": []any{"linux"}}, "/nodeSelector"},
		{"pull policy", map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, "/image/pullPolicy"},
		{"Service type", map[string]any{"metrics": map[string]any{"service": map[string]any{"type": "ExternalName"}}}, "/metrics/service/type"},
		{"toleration effect", map[string]any{"agent": map[string]any{"tolerations": []any{map[string]any{"operator": "Exists", "effect": "NoExecut"}}}}, "/agent/tolerations/0/effect"},
		{"duration without a unit", map[string]any{"leaderElection": map[string]any{"leaseDuration": "15"}}, "/leaderElection/leaseDuration"},
		{"self-fence after 30", map[string]any{"agent": map[string]any{"selfFenceAfter": 30}}, "/agent/selfFenceAfter"},
		{"relative CRI socket", map[string]any{"agent": map[string]any{"criEndpoint": "containerd.sock"}}, "/agent/criEndpoint"},
		{"port out of range", map[string]any{"agent": map[string]any{"heartbeatPort": 70000}}, "/agent/heartbeatPort"},
		{"ServiceAccount without namespace", map[string]any{"fenceRequests": map[string]any{"allowedServiceAccounts": []any{"fence-bot"}}}, "/fenceRequests/allowedServiceAccounts/0"},
		{"Prometheus interval", map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"interval": "30 seconds"}}}, "/metrics/serviceMonitor/interval"},
		{"percentage", map[string]any{"agent": map[string]any{"maxUnavailable": "ten%"}}, "/agent/maxUnavailable"},
		{"typo in crds", map[string]any{"crds": map[string]any{"kep": false}}, "kep"},
		{"string for crds.keep", map[string]any{"crds": map[string]any{"keep": "no"}}, "/crds/keep"},
		{"typo in uninstallCleanup", map[string]any{"uninstallCleanup": map[string]any{"enable": false}}, "enable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, tt.vals)
			if err == nil || !strings.Contains(err.Error(), schemaError) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want the schema error naming %q", err, tt.want)
			}
		})
	}
}
