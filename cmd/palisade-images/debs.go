package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// denied are the packages never installed, whoever depends on them: each one serves only
// dpkg's maintainer scripts or an interactive system (package management, init scripts,
// info pages, debconf prompts, the /usr merge), never a program the images run. The
// dependency walk stops at them, and an alternative (a | b) falls to its next choice. Perl
// is denied with them: only those tools pull it in.
var denied = map[string]bool{
	"dpkg":                true, // readline-common's "dpkg | install-info": its info-page trigger
	"install-info":        true,
	"init-system-helpers": true, // ipmitool's Pre-Depends: deb-systemd-helper for ipmievd's unit
	"debconf":             true,
	"debconf-2.0":         true,
	"perl":                true,
	"perl-base":           true,
	"usrmerge":            true, // init-system-helpers' "usrmerge | usr-is-merged"
	"usr-is-merged":       true,
}

// debPackage is one Debian package of an image: apt's candidate version, downloaded into the
// cache.
type debPackage struct {
	Name, Version, Architecture string
	// SHA256 is the .deb's digest from the archive's index, checked on every use.
	SHA256 string
	// Path is the .deb in the cache.
	Path string
	// Control is the package's control paragraph (dpkg-deb --field).
	Control []byte
}

// aptDependsArgs asks apt-cache for the Depends and Pre-Depends of every package, recursively.
var aptDependsArgs = []string{"depends", "--recurse", "--no-recommends", "--no-suggests",
	"--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"}

// closure returns the sorted names of roots and of every package they need, through Depends and
// Pre-Depends, apt choosing the candidate versions, without the denied packages.
func closure(ctx context.Context, roots []string) ([]string, error) {
	out, err := run(ctx, "", "apt-cache", append(aptDependsArgs, roots...)...)
	if err != nil {
		return nil, fmt.Errorf("resolving the dependencies of %s (run apt-get update): %w", strings.Join(roots, " "), err)
	}
	return walkDepends(parseDepends(out), roots)
}

// alternative is one choice of a dependency: a package, or a virtual package and its providers.
type alternative struct {
	name      string
	virtual   bool
	providers []string
}

// dependsGraph is apt-cache depends' answer: package → its dependencies, each a list of
// alternatives.
type dependsGraph map[string][][]alternative

// parseDepends reads apt-cache depends' output: a package's name at the line's start ("<name>"
// for a virtual package), then one line per dependency ("  Depends: libc6", " |Depends: a"
// when it is ORed with the next line, "<name>" for a virtual package), each followed by the
// packages providing it ("    usrmerge").
func parseDepends(out []byte) dependsGraph {
	g := dependsGraph{}
	pkg := ""         // "" under a virtual package
	open := false     // the last dependency takes the next line's alternative too
	provided := false // provider lines belong to the last alternative read
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
		case !strings.HasPrefix(line, " "):
			pkg, open, provided = "", false, false
			if !strings.HasPrefix(line, "<") { // a virtual package's own dependencies: none
				pkg = baseName(line)
				if _, ok := g[pkg]; !ok {
					g[pkg] = nil
				}
			}
		case strings.HasPrefix(line, "    "):
			if deps := g[pkg]; provided {
				alts := deps[len(deps)-1]
				alts[len(alts)-1].providers = append(alts[len(alts)-1].providers, baseName(strings.TrimSpace(line)))
			}
		default:
			kind, target, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, " |")), ": ")
			provided = pkg != "" && ok && (kind == "Depends" || kind == "PreDepends")
			if !provided {
				open = false
				continue
			}
			alt := alternative{name: baseName(strings.Trim(target, "<>")), virtual: strings.HasPrefix(target, "<")}
			if n := len(g[pkg]); open && n > 0 {
				g[pkg][n-1] = append(g[pkg][n-1], alt)
			} else {
				g[pkg] = append(g[pkg], []alternative{alt})
			}
			open = strings.HasPrefix(line, " |")
		}
	}
	return g
}

// baseName drops an architecture qualifier: "perl:any" → "perl".
func baseName(name string) string {
	n, _, _ := strings.Cut(name, ":")
	return n
}

// walkDepends returns roots and everything they depend on in g, sorted. A dependency is met by
// its first alternative that is not denied: the package itself, or for a virtual one its first
// provider that is not denied. A dependency whose every choice is denied is dropped.
func walkDepends(g dependsGraph, roots []string) ([]string, error) {
	seen := map[string]bool{}
	queue := append([]string(nil), roots...)
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		if seen[pkg] {
			continue
		}
		if denied[pkg] {
			return nil, fmt.Errorf("package %s is denied: it serves dpkg's maintainer scripts only", pkg)
		}
		deps, ok := g[pkg]
		if !ok {
			return nil, fmt.Errorf("apt-cache knows no package %s (run apt-get update)", pkg)
		}
		seen[pkg] = true
		for _, alts := range deps {
			choice, err := choose(g, alts)
			if err != nil {
				return nil, fmt.Errorf("resolving the dependencies of %s: %w", pkg, err)
			}
			if choice != "" {
				queue = append(queue, choice)
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// choose picks the package meeting one dependency, "" when every choice is denied.
func choose(g dependsGraph, alts []alternative) (string, error) {
	var names []string
	for _, a := range alts {
		names = append(names, a.name)
		if denied[a.name] {
			continue
		}
		if !a.virtual {
			return a.name, nil
		}
		for _, p := range a.providers {
			if !denied[p] {
				return p, nil
			}
		}
	}
	for _, a := range alts {
		if !denied[a.name] {
			return "", fmt.Errorf("no installable package provides %s", strings.Join(names, " | "))
		}
	}
	return "", nil
}

// candidates returns apt's candidate version of each package, as the archive's index describes
// it (apt-cache show --no-all-versions).
func candidates(ctx context.Context, names []string) (map[string]debPackage, error) {
	out, err := run(ctx, "", "apt-cache", append([]string{"show", "--no-all-versions"}, names...)...)
	if err != nil {
		return nil, fmt.Errorf("reading the candidate versions of %s (run apt-get update): %w", strings.Join(names, " "), err)
	}
	pkgs := map[string]debPackage{}
	for _, para := range bytes.Split(out, []byte("\n\n")) {
		f := controlFields(para)
		if f["Package"] == "" {
			continue
		}
		pkgs[f["Package"]] = debPackage{Name: f["Package"], Version: f["Version"], Architecture: f["Architecture"], SHA256: f["SHA256"]}
	}
	for _, n := range names {
		p, ok := pkgs[n]
		if !ok || p.Version == "" || p.Architecture == "" || p.SHA256 == "" {
			return nil, fmt.Errorf("apt-cache shows no downloadable candidate of %s (run apt-get update)", n)
		}
	}
	return pkgs, nil
}

// controlFields reads the single-line fields of a control paragraph.
func controlFields(para []byte) map[string]string {
	f := map[string]string{}
	for _, line := range strings.Split(string(para), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, " ") {
			f[k] = strings.TrimSpace(v)
		}
	}
	return f
}

// debFileName is how apt-get download names a package's file: the epoch's colon escaped.
func debFileName(p debPackage) string {
	return fmt.Sprintf("%s_%s_%s.deb", p.Name, strings.ReplaceAll(p.Version, ":", "%3a"), p.Architecture)
}

// fetch returns p with its .deb in dir (whose file names carry the versions, so that a new
// version is a new file): the cached file when its digest is the index's, else one that
// apt-get download fetches now. It reads the package's control paragraph too.
func fetch(ctx context.Context, dir string, p debPackage) (debPackage, error) {
	p.Path = filepath.Join(dir, debFileName(p))
	if err := checkDigest(p.Path, p.SHA256); err != nil {
		if err := download(ctx, dir, p); err != nil {
			return p, err
		}
	}
	control, err := run(ctx, "", "dpkg-deb", "--field", p.Path)
	if err != nil {
		return p, fmt.Errorf("reading the control file of %s: %w", p.Path, err)
	}
	p.Control = control
	f := controlFields(control)
	if f["Package"] != p.Name || f["Version"] != p.Version || f["Architecture"] != p.Architecture {
		return p, fmt.Errorf("%s holds %s %s %s, not the package apt named", p.Path, f["Package"], f["Version"], f["Architecture"])
	}
	return p, nil
}

// download fetches p with apt-get download into a fresh directory below dir, checks its
// digest and moves it to p.Path.
func download(ctx context.Context, dir string, p debPackage) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("downloading %s: %w", p.Name, err)
	}
	tmp, err := os.MkdirTemp(dir, "download-")
	if err != nil {
		return fmt.Errorf("downloading %s: %w", p.Name, err)
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(os.Stderr, "downloading %s %s into %s\n", p.Name, p.Version, dir)
	if _, err := run(ctx, tmp, "apt-get", "download", "-q", p.Name+"="+p.Version); err != nil {
		return fmt.Errorf("downloading %s %s (run apt-get update): %w", p.Name, p.Version, err)
	}
	got := filepath.Join(tmp, debFileName(p))
	if err := checkDigest(got, p.SHA256); err != nil {
		return fmt.Errorf("downloading %s: %w", p.Name, err)
	}
	if err := os.Rename(got, p.Path); err != nil {
		return fmt.Errorf("downloading %s: %w", p.Name, err)
	}
	return nil
}

// checkDigest fails unless the file at path has the SHA-256 digest want (hex).
func checkDigest(path, want string) error {
	got, err := fileDigest(path)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s has digest %s, want %s", path, got, want)
	}
	return nil
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fsysTar calls read with the package's file system as a tar stream (dpkg-deb --fsys-tarfile).
func fsysTar(ctx context.Context, p debPackage, read func(io.Reader) error) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", p.Path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("unpacking %s: %w", p.Path, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("unpacking %s (dpkg-deb comes with dpkg): %w", p.Path, err)
	}
	readErr := read(out)
	_, _ = io.Copy(io.Discard, out)
	waitErr := cmd.Wait()
	if err := errors.Join(readErr, waitErr); err != nil {
		return fmt.Errorf("unpacking %s: %w %s", p.Path, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// run runs a command in dir ("" for the current one) and returns its standard output; its
// error carries what the command wrote to standard error.
func run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("running %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
