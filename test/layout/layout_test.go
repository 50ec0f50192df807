package layout

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "palisade.dev/palisade/"

// floor is each top-level folder's height: a package may import only packages of its own folder
// or of a lower floor. detectors sit below providers, so a provider may read observations but a
// detector never reaches for a fencing method.
var floor = map[string]int{
	"cmd":       5,
	"fencing":   4,
	"providers": 3,
	"attach":    3,
	"detectors": 2,
	"config":    1,
}

// packages runs go list with format over the module and returns each line's fields, the first
// (the import path) relative to the module, for every package outside test/ and charts/.
func packages(t *testing.T, format string) [][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", format, "palisade.dev/palisade/...").Output()
	if err != nil {
		t.Fatalf("listing packages: %v", err)
	}
	var pkgs [][]string
	for _, line := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		f := strings.Fields(line)
		pkg, ok := strings.CutPrefix(f[0], module)
		if !ok || strings.HasPrefix(pkg, "test/") || strings.HasPrefix(pkg, "charts/") {
			continue
		}
		f[0] = pkg
		pkgs = append(pkgs, f)
	}
	return pkgs
}

// imports lists every non-test package of the module outside test/ with its module imports.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	for _, f := range packages(t, `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`) {
		for _, imp := range f[1:] {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				pkgs[f[0]] = append(pkgs[f[0]], rest)
			}
		}
	}
	return pkgs
}

func top(pkg string) string { return strings.SplitN(pkg, "/", 2)[0] }

// violations are the arrows that run back up, or from product code into test/, or from one
// command into another's packages.
func violations(pkgs map[string][]string) []string {
	var bad []string
	for pkg, imps := range pkgs {
		for _, imp := range imps {
			switch {
			case top(imp) == "test":
				bad = append(bad, pkg+" → "+imp+" (product code imports the test bed)")
			case top(pkg) == "cmd" && top(imp) == "cmd" && strings.SplitN(pkg, "/", 3)[1] != strings.SplitN(imp, "/", 3)[1]:
				bad = append(bad, pkg+" → "+imp+" (one command imports another's package)")
			case floor[top(imp)] > floor[top(pkg)]:
				bad = append(bad, pkg+" → "+imp+" (an arrow back up)")
			case top(pkg) != "attach" && top(imp) == "attach" && floor[top(pkg)] <= floor["attach"]:
				bad = append(bad, pkg+" → "+imp+" (attach is released by fencing only)")
			}
		}
	}
	return bad
}

func TestFloors(t *testing.T) {
	pkgs := imports(t)
	if len(pkgs) < 10 {
		t.Fatalf("only %d packages listed: %v", len(pkgs), pkgs)
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestFloorsCatchViolations: the check itself fails on each kind of bad arrow.
func TestFloorsCatchViolations(t *testing.T) {
	for _, tc := range []struct{ pkg, imp string }{
		{"providers/ipmi", "fencing"},
		{"detectors/observe", "providers/agent/channel"},
		{"config/v1alpha1", "detectors"},
		{"cmd/palisade", "test/scenario"},
		{"cmd/palisade", "cmd/palisade-controller/app"},
		{"fencing", "cmd/palisade-controller/app"},
	} {
		if got := violations(map[string][]string{tc.pkg: {tc.imp}}); len(got) != 1 {
			t.Errorf("%s → %s: %v, want one violation", tc.pkg, tc.imp, got)
		}
	}
	if got := violations(map[string][]string{"fencing": {"providers", "detectors/observe", "attach", "config/v1alpha1"}, "cmd/palisade-agent": {"providers/agent/channel"}}); len(got) != 0 {
		t.Errorf("allowed arrows reported: %v", got)
	}
}
