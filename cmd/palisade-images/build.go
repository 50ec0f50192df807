package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// registry is the host part of the images' names; no registry serves it.
const registry = "palisade.dev"

// options are a build's inputs.
type options struct {
	metadata
	// ModuleDir is the module's root; OutDir receives <image>.tar and <image>.spdx.json;
	// CacheDir keeps the downloaded Debian packages.
	ModuleDir, OutDir, CacheDir string
	Specs                       []spec
}

// built is one image written by build.
type built struct {
	Spec    spec
	Ref     name.Tag
	Tarball string
	SBOM    string
	// ImageID is the configuration's digest (what docker load and ctr show as the image's ID);
	// Digest is the manifest's (Docker media types, as a registry would receive it).
	ImageID, Digest v1.Hash
	Size            int64
}

// build builds every image of o.Specs into o.OutDir.
func build(ctx context.Context, o options) ([]built, error) {
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", o.OutDir, err)
	}
	binDir, err := os.MkdirTemp("", "palisade-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(binDir)
	bins, err := buildBinaries(ctx, o.ModuleDir, binDir, allBinaries(o.Specs))
	if err != nil {
		return nil, err
	}
	debs, err := resolveDebs(ctx, o.Specs, filepath.Join(o.CacheDir, "debs"))
	if err != nil && os.Geteuid() == 0 {
		// The package lists may be empty (a new machine) or stale (the mirror dropped the
		// versions they name): refresh them once, as make deps does before installing.
		fmt.Fprintf(os.Stderr, "%v\nrunning apt-get update and trying again\n", err)
		if _, uerr := run(ctx, "", "apt-get", "update", "-qq"); uerr != nil {
			return nil, fmt.Errorf("%w (then %w)", err, uerr)
		}
		debs, err = resolveDebs(ctx, o.Specs, filepath.Join(o.CacheDir, "debs"))
	}
	if err != nil {
		return nil, err
	}
	var out []built
	for _, s := range o.Specs {
		b, err := buildImage(ctx, o, s, bins, debs[s.Name])
		if err != nil {
			return nil, fmt.Errorf("building image %s: %w", s.Name, err)
		}
		out = append(out, b)
	}
	return out, nil
}

func allBinaries(specs []spec) []string {
	set := map[string]bool{}
	for _, s := range specs {
		for _, b := range s.Binaries {
			set[b] = true
		}
	}
	return sortedKeys(set)
}

// resolveDebs resolves the Debian packages of every spec and downloads them into dir (or finds
// them there): spec name → its packages, sorted by name.
func resolveDebs(ctx context.Context, specs []spec, dir string) (map[string][]debPackage, error) {
	perSpec := map[string][]string{}
	set := map[string]bool{}
	for _, s := range specs {
		names, err := specDebs(ctx, s)
		if err != nil {
			return nil, err
		}
		perSpec[s.Name] = names
		for _, n := range names {
			set[n] = true
		}
	}
	names := sortedKeys(set)
	cands, err := candidates(ctx, names)
	if err != nil {
		return nil, err
	}
	debs := map[string]debPackage{}
	for _, n := range names {
		if debs[n], err = fetch(ctx, dir, cands[n]); err != nil {
			return nil, err
		}
	}
	out := map[string][]debPackage{}
	for _, s := range specs {
		for _, n := range perSpec[s.Name] {
			out[s.Name] = append(out[s.Name], debs[n])
		}
	}
	return out, nil
}

// specDebs names the Debian packages of an image: the closure of s.Closure and s.Standalone.
func specDebs(ctx context.Context, s spec) ([]string, error) {
	set := map[string]bool{}
	if len(s.Closure) > 0 {
		names, err := closure(ctx, s.Closure)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			set[n] = true
		}
	}
	for _, n := range s.Standalone {
		set[n] = true
	}
	return sortedKeys(set), nil
}

func buildImage(ctx context.Context, o options, s spec, binPaths map[string]string, debs []debPackage) (built, error) {
	b := built{Spec: s}
	ref, err := name.NewTag(registry + "/" + s.Name + ":" + o.Version)
	if err != nil {
		return b, fmt.Errorf("naming the image (version %q): %w", o.Version, err)
	}
	b.Ref = ref
	in := sbomInput{Image: s.Name, Version: o.Version, Revision: o.Revision, Source: o.Source, Created: o.Epoch,
		Digests: map[string]string{}, Debs: debs}
	bins := map[string][]byte{}
	for _, n := range s.Binaries {
		gb, err := readGoBinary(n, binPaths[n])
		if err != nil {
			return b, err
		}
		in.Binaries = append(in.Binaries, gb)
		if bins[n], err = os.ReadFile(binPaths[n]); err != nil {
			return b, err
		}
		if in.Digests[n], err = fileDigest(binPaths[n]); err != nil {
			return b, err
		}
	}
	base, distro, err := baseLayer(ctx, s, debs, o.Epoch)
	if err != nil {
		return b, err
	}
	in.Distro = distro
	sbomJSON, err := newSBOM(in)
	if err != nil {
		return b, err
	}
	app, err := appLayer(s, bins, sbomJSON, o.Epoch)
	if err != nil {
		return b, err
	}
	img, err := assemble(s, o.metadata, base, app)
	if err != nil {
		return b, err
	}
	return write(o.OutDir, b, img, sbomJSON)
}

// write writes the image as a docker-archive tarball (what docker save writes: docker load
// and ctr images import take it) and its SBOM beside it, each replacing the old file at once.
func write(dir string, b built, img v1.Image, sbomJSON []byte) (built, error) {
	b.Tarball = filepath.Join(dir, b.Spec.Name+".tar")
	b.SBOM = filepath.Join(dir, b.Spec.Name+".spdx.json")
	var err error
	if b.ImageID, err = img.ConfigName(); err != nil {
		return b, err
	}
	if b.Digest, err = img.Digest(); err != nil {
		return b, err
	}
	tmp := b.Tarball + ".new"
	if err := tarball.WriteToFile(tmp, b.Ref, img); err != nil {
		os.Remove(tmp)
		return b, fmt.Errorf("writing %s: %w", b.Tarball, err)
	}
	if err := os.Rename(tmp, b.Tarball); err != nil {
		return b, err
	}
	if err := os.WriteFile(b.SBOM+".new", sbomJSON, 0o644); err != nil {
		return b, err
	}
	if err := os.Rename(b.SBOM+".new", b.SBOM); err != nil {
		return b, err
	}
	st, err := os.Stat(b.Tarball)
	if err != nil {
		return b, err
	}
	b.Size = st.Size()
	return b, nil
}

// osRelease reads the distribution of an os-release file as a purl's distro: "debian-12".
func osRelease(data []byte) string {
	f := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			f[k] = strings.Trim(v, `"`)
		}
	}
	if f["ID"] == "" {
		return "debian"
	}
	if f["VERSION_ID"] == "" {
		return f["ID"]
	}
	return f["ID"] + "-" + f["VERSION_ID"]
}

func sortedKeys(set map[string]bool) []string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
