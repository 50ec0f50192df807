package palisade_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"
)

// moduleRoot is the repository's root, seen from the chart's directory.
const moduleRoot = "../.."

// metricDef is what the source says of one metric.
type metricDef struct {
	histogram bool
	labels    []string
}

// registeredMetrics parses the module's Go source (test files and test/ left out) and returns
// the metrics it defines through client_golang — prometheus.New<Kind>[Vec](<Kind>Opts{...},
// labels) with the full name built from Namespace, Subsystem and Name, and prometheus.NewDesc
// (name, help, labels, ...) of custom collectors — and every string literal of that source.
// Names and labels given as constants of the same package are resolved.
func registeredMetrics(t *testing.T) (map[string]metricDef, map[string]bool) {
	t.Helper()
	defs, literals := map[string]metricDef{}, map[string]bool{}
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{}
	err := filepath.WalkDir(moduleRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch rel, _ := filepath.Rel(moduleRoot, path); {
			case rel == "test", rel == "charts", d.Name() == "testdata", strings.HasPrefix(d.Name(), ".") && rel != ".":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatalf("reading the source: %v", err)
	}
	for _, files := range pkgs {
		consts := stringConsts(files)
		str := func(e ast.Expr) (string, bool) { return stringOf(e, consts) }
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if s, ok := str(n); ok {
						literals[s] = true
					}
				case *ast.CallExpr:
					if name, def, ok := metricOf(n, str); ok {
						defs[name] = def
					}
				}
				return true
			})
		}
	}
	return defs, literals
}

// metricOf reads a metric's definition from a call of prometheus.New….
func metricOf(call *ast.CallExpr, str func(ast.Expr) (string, bool)) (string, metricDef, bool) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || len(call.Args) == 0 {
		return "", metricDef{}, false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
		return "", metricDef{}, false
	}
	labelsAt := func(i int) []string {
		if i >= len(call.Args) {
			return nil
		}
		lit, ok := call.Args[i].(*ast.CompositeLit)
		if !ok {
			return nil
		}
		var ls []string
		for _, e := range lit.Elts {
			if s, ok := str(e); ok {
				ls = append(ls, s)
			}
		}
		return ls
	}
	if sel.Sel.Name == "NewDesc" {
		name, ok := str(call.Args[0])
		return name, metricDef{labels: labelsAt(2)}, ok
	}
	opts, ok := call.Args[0].(*ast.CompositeLit)
	if !ok || !strings.HasPrefix(sel.Sel.Name, "New") {
		return "", metricDef{}, false
	}
	var ns, sub, name string
	for _, e := range opts.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		key, _ := kv.Key.(*ast.Ident)
		v, _ := str(kv.Value)
		switch key.Name {
		case "Namespace":
			ns = v
		case "Subsystem":
			sub = v
		case "Name":
			name = v
		}
	}
	if name == "" {
		return "", metricDef{}, false
	}
	def := metricDef{histogram: strings.HasPrefix(sel.Sel.Name, "NewHistogram")}
	if strings.HasSuffix(sel.Sel.Name, "Vec") {
		def.labels = labelsAt(1)
	}
	return prometheus.BuildFQName(ns, sub, name), def, true
}

// stringConsts are the string constants declared at the top of a package's files.
func stringConsts(files []*ast.File) map[string]string {
	consts := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := stringOf(vs.Values[i], nil); ok {
							consts[n.Name] = s
						}
					}
				}
			}
		}
	}
	return consts
}

// stringOf is the value of a string literal, or of a constant in consts.
func stringOf(e ast.Expr, consts map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[e.Name]
		return s, ok
	}
	return "", false
}

// decodeLoose decodes a manifest, ignoring the fields into does not have.
func decodeLoose(t *testing.T, m manifest, into any) {
	t.Helper()
	if err := yaml.Unmarshal(m.doc, into); err != nil {
		t.Fatalf("%s: decoding %s %s: %v", m.template, m.kind, m.name, err)
	}
}
