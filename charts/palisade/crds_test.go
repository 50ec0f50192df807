package palisade_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// keepPolicy is the annotation that makes helm uninstall leave an object behind.
const keepPolicy = "helm.sh/resource-policy"

// generatedCRDs reads the CRDs `make generate` writes to files/crds, by name, as generic maps:
// every field counts, not only those the Go types know.
func generatedCRDs(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob("files/crds/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD in files/crds (%v)", err)
	}
	crds := map[string]map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range splitManifests(t, f, string(b)) {
			var obj map[string]any
			if err := yaml.Unmarshal(m.doc, &obj); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			crds[m.name] = obj
		}
	}
	return crds
}

// TestCRDs: the chart renders the CRDs that `make generate` writes, field for field, adding
// only the release's labels and, with crds.keep (the default), the annotation that keeps them
// (and every NodeFence) on helm uninstall; crds.enabled=false renders none.
func TestCRDs(t *testing.T) {
	generated := generatedCRDs(t)
	tests := []struct {
		name  string
		vals  map[string]any
		count int
		keep  bool
	}{
		{"defaults", nil, 2, true},
		{"crds.keep=false", map[string]any{"crds": map[string]any{"keep": false}}, 2, false},
		{"crds.enabled=false", map[string]any{"crds": map[string]any{"enabled": false}}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := render(t, tt.vals)
			if err != nil {
				t.Fatalf("rendering: %v", err)
			}
			crds := find(ms, "CustomResourceDefinition")
			if len(crds) != tt.count {
				t.Fatalf("rendered %d CRDs, want %d", len(crds), tt.count)
			}
			for _, m := range crds {
				typed := &apiextensionsv1.CustomResourceDefinition{}
				decodeStrict(t, m, typed)
				if got := typed.Annotations[keepPolicy]; (got == "keep") != tt.keep || got != "" && got != "keep" {
					t.Errorf("CRD %s: annotation %s=%q, want it set to keep: %v", m.name, keepPolicy, got, tt.keep)
				}
				if typed.Labels["app.kubernetes.io/managed-by"] != "Helm" || typed.Labels["app.kubernetes.io/instance"] != "palisade" {
					t.Errorf("CRD %s: labels %v lack the release's", m.name, typed.Labels)
				}
				compareToGenerated(t, m, generated[m.name])
			}
		})
	}
}

// compareToGenerated: the rendered CRD without the release's labels and the keep annotation
// is the generated one.
func compareToGenerated(t *testing.T, m manifest, want map[string]any) {
	t.Helper()
	if want == nil {
		t.Errorf("CRD %s is not in files/crds", m.name)
		return
	}
	var got map[string]any
	if err := yaml.Unmarshal(m.doc, &got); err != nil {
		t.Fatal(err)
	}
	meta := got["metadata"].(map[string]any)
	delete(meta, "labels")
	if anns, ok := meta["annotations"].(map[string]any); ok {
		delete(anns, keepPolicy)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CRD %s differs from files/crds (-generated +rendered):\n%s", m.name, diff)
	}
}
