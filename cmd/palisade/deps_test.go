package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShippedDependencies keeps the shipped CLI free of the test bed: no package under test/
// (the demo lives in test/cmd/palisade-demo), no envtest, no CSI test suite, and no other
// command's packages.
func TestShippedDependencies(t *testing.T) {
	const self = "palisade.dev/palisade/cmd/palisade"
	out, err := exec.Command("go", "list", "-deps", self).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", self, err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed nothing", self)
	}
	forbidden := []struct {
		name, prefix string
	}{
		{"the test bed", "palisade.dev/palisade/test/"},
		{"envtest", "sigs.k8s.io/controller-runtime/pkg/envtest"},
		{"the CSI test suite", "github.com/kubernetes-csi/csi-test"},
		{"another command", "palisade.dev/palisade/cmd/"},
	}
	for _, f := range forbidden {
		t.Run(f.name, func(t *testing.T) {
			for _, d := range deps {
				if d != self && (d == strings.TrimSuffix(f.prefix, "/") || strings.HasPrefix(d, f.prefix)) {
					t.Errorf("%s links %s (%s)", self, d, f.name)
				}
			}
		})
	}
}
