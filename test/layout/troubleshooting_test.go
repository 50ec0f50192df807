package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// moduleRoot is the repository's root, seen from this directory.
const moduleRoot = "../.."

// troubleshootingHeading opens README's section keyed by reason; the next level-2 heading ends it.
const troubleshootingHeading = "## Troubleshooting"

// notShown are the Reason constants (package directory and name) that never reach an object or
// an Event, so the section leaves them out. The test fails when one of them is gone.
var notShown = map[string]string{
	"fencing.ReasonFenceRequested": "declared with the Event reasons, never raised",
	"fencing.ReasonNodeDeleted":    "declared with the Event reasons, never raised (NodeDeleted is a fence's spec.trigger)",
	// A storage gateway's HTTP error reasons: the controller records them as BadTarget and
	// StorageFenceRefused (the gateway's own reason is only in the message).
	"config/gatewaywire.ReasonBadRequest":    "the gateway's 400 answer",
	"config/gatewaywire.ReasonGatewayFailed": "the gateway's 500 answer",
	// Why the executor stops containers: in its report and the agent's log only.
	"providers/executor.ReasonPodTermination": "the executor's kill reason",
	"providers/executor.ReasonLivenessProbe":  "the executor's kill reason",
	"providers/executor.ReasonStartupProbe":   "the executor's kill reason",
}

// shownUnderOtherNames are constants not named Reason… whose values reach an object as a reason.
var shownUnderOtherNames = map[string]string{
	"config/v1alpha1.RecoveryRebooted":            "Recovered=True reason (the recovery's how)",
	"config/v1alpha1.RecoveryConfirmedClean":      "Recovered=True reason (the recovery's how)",
	"config/v1alpha1.ConditionInsecureTLS":        "the Warning Event's reason when a policy's InsecureTLS turns True",
	"config/v1alpha1.ConditionInvalidSpec":        "the Warning Event's reason when a policy's InvalidSpec turns True",
	"config/v1alpha1.ConditionLeaseTimeoutRaised": "the Warning Event's reason when a policy's LeaseTimeoutRaised appears",
}

// TestTroubleshootingCoversEveryReason: every reason the code puts on an object or an Event has
// a row in README's Troubleshooting section, and every reason a row names is still set.
func TestTroubleshootingCoversEveryReason(t *testing.T) {
	src := parseModule(t)
	shown, errs := src.shownReasons()
	for _, err := range errs {
		t.Error(err)
	}
	if len(shown) < 50 {
		t.Fatalf("only %d reasons found in the source: %v", len(shown), shown)
	}
	readme, err := os.ReadFile(filepath.Join(moduleRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sec, ok := section(string(readme), troubleshootingHeading)
	if !ok {
		t.Fatalf("README.md has no %q section", troubleshootingHeading)
	}
	named := namedReasons(sec)
	t.Logf("%d reasons in the source, %d named in README's %s", len(shown), len(named), troubleshootingHeading)
	missing, stale := gaps(shown, named)
	for _, r := range missing {
		t.Errorf("reason %s (%s) has no row in README's %s: add one, the reason backticked in the first column (or, if no object ever shows it, put it in notShown with why)",
			r, shown[r], troubleshootingHeading)
	}
	for _, r := range stale {
		t.Errorf("README's %s names reason %s, which the code no longer sets", troubleshootingHeading, r)
	}
}

// TestTroubleshootingCheckCatchesGaps: the check fails when a row goes or names a reason the code
// does not set.
func TestTroubleshootingCheckCatchesGaps(t *testing.T) {
	shown := map[string]string{"BMCUnreachable": "providers.ReasonUnreachable", "PowerStillOn": "providers.ReasonPowerStillOn"}
	sec := "## Troubleshooting\n\n| reason | means | do |\n|---|---|---|\n| `BMCUnreachable` | … | … |\n| `Rebooting`, `BMCUnreachable` | … | … |\n"
	missing, stale := gaps(shown, namedReasons(sec))
	if !slices.Equal(missing, []string{"PowerStillOn"}) || !slices.Equal(stale, []string{"Rebooting"}) {
		t.Errorf("missing %v, stale %v: want [PowerStillOn] and [Rebooting]", missing, stale)
	}
	if missing, stale := gaps(shown, namedReasons(sec+"| `PowerStillOn` | … | … |\n")); len(missing) != 0 || !slices.Equal(stale, []string{"Rebooting"}) {
		t.Errorf("with a PowerStillOn row: missing %v, stale %v", missing, stale)
	}
	// A row of the real section taken out is missed.
	readme, err := os.ReadFile(filepath.Join(moduleRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := section(string(readme), troubleshootingHeading)
	all := namedReasons(doc)
	line := strings.SplitAfter(doc, "\n")
	for i, l := range line {
		row := namedReasons(l)
		if len(row) == 0 {
			continue
		}
		cut := strings.Join(slices.Delete(slices.Clone(line), i, i+1), "")
		missing, _ := gaps(all, namedReasons(cut))
		for r := range row {
			if all[r] == 1 && !slices.Contains(missing, r) {
				t.Errorf("the row of %s taken out, the check still finds it (missing %v)", r, missing)
			}
		}
		return
	}
	t.Fatal("no row found in README's Troubleshooting section")
}

// section is the text from the heading's line to the next level-2 heading.
func section(doc, heading string) (string, bool) {
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return "", false
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i+1]
	}
	return rest, true
}

var backticked = regexp.MustCompile("`([^`]+)`")

// namedReasons counts the backticked words in the first column of the text's table rows.
func namedReasons(text string) map[string]int {
	named := map[string]int{}
	for _, l := range strings.Split(text, "\n") {
		cells := strings.Split(strings.TrimSpace(l), "|")
		if len(cells) < 3 || cells[0] != "" {
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			named[m[1]]++
		}
	}
	return named
}

// gaps are the shown reasons no row names, and the named reasons no code shows, sorted.
func gaps[S, N any](shown map[string]S, named map[string]N) (missing, stale []string) {
	for r := range shown {
		if _, ok := named[r]; !ok {
			missing = append(missing, r)
		}
	}
	for r := range named {
		if _, ok := shown[r]; !ok {
			stale = append(stale, r)
		}
	}
	slices.Sort(missing)
	slices.Sort(stale)
	return missing, stale
}

// sourceTree is what the test reads of the module's Go source.
type sourceTree struct {
	// consts holds every exported package-level constant with a value, by "dir.Name": a string
	// literal's value, or the "dir.Name" it refers to (through conversions).
	consts map[string]constant
	// literals are string literals given as a Reason field (Status{Reason: "…"}), by position.
	literals map[string]string
	// errs are what the source says that the test cannot follow.
	errs []error
}

type constant struct {
	value, ref string
	literal    bool
}

// parseModule parses the non-test Go files of the module's packages, test/ and charts/ left out.
func parseModule(t *testing.T) *sourceTree {
	t.Helper()
	m := &sourceTree{consts: map[string]constant{}, literals: map[string]string{}}
	fset := token.NewFileSet()
	for _, f := range packages(t, `{{.ImportPath}} {{.Dir}}{{range .GoFiles}} {{.}}{{end}}`) {
		for _, name := range f[2:] {
			file, err := parser.ParseFile(fset, filepath.Join(f[1], name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			m.read(fset, file, f[0])
		}
	}
	return m
}

// read records the file's constants, its Reason literals and its Event reasons.
func (m *sourceTree) read(fset *token.FileSet, f *ast.File, dir string) {
	imports := map[string]string{} // local name → directory in the module
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		rel, ok := strings.CutPrefix(p, module)
		if !ok {
			continue
		}
		name := rel[strings.LastIndex(rel, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = rel
	}
	// ref names the constant an expression refers to, through conversions; "" when it does not.
	var ref func(e ast.Expr) string
	ref = func(e ast.Expr) string {
		switch e := e.(type) {
		case *ast.Ident:
			if e.IsExported() {
				return dir + "." + e.Name
			}
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok && imports[x.Name] != "" {
				return imports[x.Name] + "." + e.Sel.Name
			}
		case *ast.CallExpr:
			if len(e.Args) == 1 {
				return ref(e.Args[0])
			}
		}
		return ""
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !n.IsExported() || i >= len(vs.Values) {
					continue
				}
				c := constant{ref: ref(vs.Values[i])}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					c.value, _ = strconv.Unquote(lit.Value)
					c.literal = true
				}
				m.consts[dir+"."+n.Name] = c
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Reason" {
				if lit, ok := n.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					m.literals[fset.Position(lit.Pos()).String()] = v
				}
			}
		case *ast.CallExpr:
			// Recorder.Eventf(regarding, related, type, reason, action, note, ...): a reason that
			// is a constant must be a Reason… one or one of shownUnderOtherNames.
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Eventf" && len(n.Args) > 3 {
				r := ref(n.Args[3])
				name := r[strings.LastIndex(r, ".")+1:]
				if r != "" && !strings.HasPrefix(name, "Reason") && shownUnderOtherNames[r] == "" {
					m.errs = append(m.errs, fmt.Errorf("%s: Event reason %s is neither a Reason constant nor in shownUnderOtherNames",
						fset.Position(n.Pos()), r))
				}
			}
		}
		return true
	})
}

// value is a constant's string value, followed through the constants it refers to.
func (m *sourceTree) value(key string) (string, bool) {
	for range 10 {
		c, ok := m.consts[key]
		switch {
		case !ok:
			return "", false
		case c.literal:
			return c.value, true
		}
		key = c.ref
	}
	return "", false
}

// shownReasons are the reasons that reach an object or an Event, each with where it is defined:
// the exported string constants named Reason… (but notShown), the constants of
// shownUnderOtherNames and the Reason literals.
func (m *sourceTree) shownReasons() (map[string]string, []error) {
	shown, errs := map[string]string{}, m.errs
	add := func(key string) {
		v, ok := m.value(key)
		if !ok {
			errs = append(errs, fmt.Errorf("reason constant %s: no string value the test can read (give it a literal, or refer to another constant)", key))
			return
		}
		if shown[v] == "" || key < shown[v] {
			shown[v] = key
		}
	}
	for key := range m.consts {
		name := key[strings.LastIndex(key, ".")+1:]
		if strings.HasPrefix(name, "Reason") && notShown[key] == "" {
			add(key)
		}
	}
	for key := range shownUnderOtherNames {
		add(key)
	}
	for pos, v := range m.literals {
		if shown[v] == "" {
			shown[v] = pos
		}
	}
	for key := range notShown {
		if _, ok := m.consts[key]; !ok {
			errs = append(errs, fmt.Errorf("notShown lists %s, which no longer exists", key))
		}
	}
	return shown, errs
}
