package main

import (
	"context"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// goLDFlags strip the symbol table, DWARF and the build ID, which would differ between builds.
const goLDFlags = "-s -w -buildid="

// buildBinaries builds the commands ./cmd/<name> of the module in moduleDir into dir, static
// (CGO_ENABLED=0) and reproducible (-trimpath, no build ID), for linux on this machine's
// architecture (the architecture of the Debian packages beside them), and returns their paths
// by name. Each one is checked to be a static executable.
func buildBinaries(ctx context.Context, moduleDir, dir string, names []string) (map[string]string, error) {
	args := []string{"build", "-trimpath", "-ldflags", goLDFlags, "-o", dir + string(filepath.Separator)}
	for _, n := range names {
		args = append(args, "./cmd/"+n)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s: %w\n%s", strings.Join(names, ", "), err, out)
	}
	bins := map[string]string{}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := checkStatic(p); err != nil {
			return nil, err
		}
		bins[n] = p
	}
	return bins, nil
}

// checkStatic fails unless the ELF file at p asks for no program interpreter (the dynamic
// loader): with cgo, it would need the C library of the image.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("reading %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: something needs cgo", p)
		}
	}
	return nil
}

// goModule is a Go module linked into a binary, as its build information records it.
type goModule struct {
	Path, Version, Sum string
}

// goBinary is what a binary's build information says about it.
type goBinary struct {
	Name, GoVersion string
	Main            goModule
	Deps            []goModule
	// Revision is the VCS revision the binary was built from, "" if unknown.
	Revision string
}

// readGoBinary reads the build information of the binary at p (debug/buildinfo): the Go
// version, the main module and every module linked in, a replaced one as its replacement.
func readGoBinary(name, p string) (goBinary, error) {
	info, err := buildinfo.ReadFile(p)
	if err != nil {
		return goBinary{}, fmt.Errorf("reading the build information of %s: %w", p, err)
	}
	b := goBinary{Name: name, GoVersion: info.GoVersion, Main: goModule{Path: info.Main.Path, Version: info.Main.Version, Sum: info.Main.Sum}}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		b.Deps = append(b.Deps, goModule{Path: d.Path, Version: d.Version, Sum: d.Sum})
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			b.Revision = s.Value
		}
	}
	return b, nil
}
