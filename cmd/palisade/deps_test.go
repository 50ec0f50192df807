package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShippedDependencies keeps the shipped CLI free of the test bed: no package under test/
// (the demo lives in test/cmd/palisade-demo), no envtest, no CSI test suite, and no other
// command's packages; and free of the controller: not its state machine (fencing), its
// providers or its attachment breaker. Of the module it links only the API and the Lease
// detector's rule.
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
		{"the controller's state machine", "palisade.dev/palisade/fencing/"},
		{"the providers", "palisade.dev/palisade/providers/"},
		{"the attachment breaker", "palisade.dev/palisade/attach/"},
		{"a BMC library", "github.com/bmc-toolbox/"},
		{"the AWS SDK", "github.com/aws/"},
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

	t.Run("only the API of the module", func(t *testing.T) {
		allowed := map[string]bool{
			self:                                    true,
			"palisade.dev/palisade/config/v1alpha1": true,
			"palisade.dev/palisade/config/names":    true,
			"palisade.dev/palisade/detectors":       true, // the verdict type
			"palisade.dev/palisade/detectors/lease": true, // the API's view of a node
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "palisade.dev/") && !allowed[d] {
				t.Errorf("%s links %s: the CLI reads the cluster through the API only", self, d)
			}
		}
	})
}
