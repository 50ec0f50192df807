package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// testMetadata are the labels of the images the tests build.
var testMetadata = metadata{Version: "v0.0.0-test", Revision: "0123456789abcdef0123456789abcdef01234567",
	Source: defaultSource, Epoch: time.Unix(1700000000, 0).UTC()}

// buildForTest builds both images into a fresh directory, the Debian packages cached where
// make images caches them.
func buildForTest(t *testing.T, ctx context.Context) map[string]built {
	t.Helper()
	moduleDir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := lookTools(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	images, err := build(ctx, options{metadata: testMetadata, ModuleDir: moduleDir, OutDir: t.TempDir(), CacheDir: defaultCache(), Specs: specs})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built both images in %s", time.Since(start).Round(time.Second))
	out := map[string]built{}
	for _, b := range images {
		out[b.Spec.Name] = b
	}
	return out
}

// TestImages builds both images and checks them: their configuration and labels, their files,
// their SBOMs; it runs them in a real containerd (ipmitool and the controller as 65532, the
// agent, its executor, /bin/sh and nsenter as root); and it builds them again to find the
// same digests.
func TestImages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	images := buildForTest(t, ctx)
	ctl, agent := images["palisade-controller"], images["palisade-agent"]
	t.Run("Config", func(t *testing.T) {
		checkConfig(t, ctl, "65532:65532", "/usr/local/bin/palisade-controller")
		checkConfig(t, agent, "0:0", "/usr/local/bin/palisade-agent")
	})
	t.Run("DockerArchive", func(t *testing.T) {
		for _, b := range images {
			checkDockerArchive(t, b)
		}
	})
	ctlFiles, agentFiles := imageFiles(t, ctl), imageFiles(t, agent)
	t.Run("Files", func(t *testing.T) {
		checkControllerFiles(t, ctlFiles)
		checkAgentFiles(t, agentFiles)
	})
	t.Run("SBOM", func(t *testing.T) {
		checkSBOM(t, ctl, ctlFiles, []string{"github.com/bmc-toolbox/bmclib/v2", "github.com/aws/aws-sdk-go-v2", "stdlib", "palisade.dev/palisade"},
			[]string{"ipmitool", "libc6", "libssl3", "ca-certificates", "base-files"})
		checkSBOM(t, agent, agentFiles, []string{"palisade.dev/palisade", "k8s.io/cri-api", "stdlib"}, []string{"busybox-static", "base-files"})
	})
	t.Run("Containerd", func(t *testing.T) { runInContainerd(t, ctx, ctl, agent) })
	t.Run("Reproducible", func(t *testing.T) {
		again := buildForTest(t, ctx)
		for name, first := range images {
			second := again[name]
			if first.ImageID != second.ImageID || first.Digest != second.Digest {
				t.Errorf("%s: image ID %s then %s, digest %s then %s", name, first.ImageID, second.ImageID, first.Digest, second.Digest)
			}
			for _, f := range [][2]string{{first.Tarball, second.Tarball}, {first.SBOM, second.SBOM}} {
				a, b := mustDigest(t, f[0]), mustDigest(t, f[1])
				if a != b {
					t.Errorf("%s: %s has digest %s, the second build's %s", name, filepath.Base(f[0]), a, b)
				}
			}
		}
	})
}

func mustDigest(t *testing.T, p string) string {
	t.Helper()
	d, err := fileDigest(p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func readImage(t *testing.T, b built) v1.Image {
	t.Helper()
	img, err := tarball.ImageFromPath(b.Tarball, &b.Ref)
	if err != nil {
		t.Fatalf("reading %s: %v", b.Tarball, err)
	}
	return img
}

func checkConfig(t *testing.T, b built, user, entrypoint string) {
	t.Helper()
	cfg, err := readImage(t, b).ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	name := b.Spec.Name
	c := cfg.Config
	if c.User != user || len(c.Entrypoint) != 1 || c.Entrypoint[0] != entrypoint || len(c.Cmd) != 0 {
		t.Errorf("%s: user %q, entrypoint %q, cmd %q; want %q, [%s], none", name, c.User, c.Entrypoint, c.Cmd, user, entrypoint)
	}
	if len(c.Env) != 1 || !strings.HasPrefix(c.Env[0], "PATH=") || !strings.Contains(c.Env[0], ":/usr/bin:") {
		t.Errorf("%s: environment %q, want a PATH with /usr/bin", name, c.Env)
	}
	if !cfg.Created.Time.Equal(testMetadata.Epoch) || cfg.OS != "linux" || cfg.RootFS.Type != "layers" || len(cfg.RootFS.DiffIDs) != 2 {
		t.Errorf("%s: created %s, os %s, rootfs %+v; want %s, linux, 2 layers", name, cfg.Created, cfg.OS, cfg.RootFS, testMetadata.Epoch)
	}
	for _, h := range cfg.History {
		if !h.Created.Time.Equal(testMetadata.Epoch) {
			t.Errorf("%s: history entry %q created %s, want %s", name, h.CreatedBy, h.Created, testMetadata.Epoch)
		}
	}
	want := map[string]string{
		"org.opencontainers.image.title":    name,
		"org.opencontainers.image.version":  testMetadata.Version,
		"org.opencontainers.image.revision": testMetadata.Revision,
		"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
		"org.opencontainers.image.source":   defaultSource,
		"org.opencontainers.image.vendor":   "Palisade",
	}
	for k, v := range want {
		if c.Labels[k] != v {
			t.Errorf("%s: label %s = %q, want %q", name, k, c.Labels[k], v)
		}
	}
	if c.Labels["org.opencontainers.image.description"] == "" {
		t.Errorf("%s: no description label", name)
	}
	if _, ok := c.Labels["org.opencontainers.image.licenses"]; ok {
		t.Errorf("%s: a licenses label, but the repository has no LICENSE", name)
	}
}

// checkDockerArchive checks the tarball's manifest.json, what docker load and ctr read: one
// image, tagged with its name, its configuration and layers present.
func checkDockerArchive(t *testing.T, b built) {
	t.Helper()
	f, err := os.Open(b.Tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data := []byte{}
		if h.Name == "manifest.json" {
			data, _ = io.ReadAll(tr)
		}
		names[h.Name] = data
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(names["manifest.json"], &manifest); err != nil {
		t.Fatalf("%s: manifest.json: %v", b.Tarball, err)
	}
	if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 || manifest[0].RepoTags[0] != "palisade.dev/"+b.Spec.Name+":"+testMetadata.Version || len(manifest[0].Layers) != 2 {
		t.Fatalf("%s: manifest.json %+v, want one image tagged palisade.dev/%s:%s with 2 layers", b.Tarball, manifest, b.Spec.Name, testMetadata.Version)
	}
	for _, n := range append([]string{manifest[0].Config}, manifest[0].Layers...) {
		if _, ok := names[n]; !ok {
			t.Errorf("%s: manifest.json names %s, which is not in the tarball", b.Tarball, n)
		}
	}
	if manifest[0].Config != b.ImageID.Hex+".json" && manifest[0].Config != "sha256:"+b.ImageID.Hex {
		t.Errorf("%s: configuration %s, want the image ID %s", b.Tarball, manifest[0].Config, b.ImageID)
	}
	// The digest reported is the manifest's that a push of the tarball (crane push) uploads.
	if d, err := readImage(t, b).Digest(); err != nil || d != b.Digest {
		t.Errorf("%s: the tarball's image has digest %s (%v), want %s", b.Tarball, d, err, b.Digest)
	}
}

// file is one entry of an image's flattened file system.
type file struct {
	hdr  *tar.Header
	data []byte
}

// imageFiles reads every layer of the image (there are no whiteouts) and checks that every
// entry has the epoch's time, no owner names, and that each layer's entries are sorted.
func imageFiles(t *testing.T, b built) map[string]file {
	t.Helper()
	layers, err := readImage(t, b).Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]file{}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		prev := ""
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if !h.ModTime.Equal(testMetadata.Epoch) || h.Uname != "" || h.Gname != "" {
				t.Errorf("%s layer %d: %s has time %s, owner %q:%q", b.Spec.Name, i, h.Name, h.ModTime, h.Uname, h.Gname)
			}
			if h.Name <= prev {
				t.Errorf("%s layer %d: %s comes after %s", b.Spec.Name, i, h.Name, prev)
			}
			prev = h.Name
			data, _ := io.ReadAll(tr)
			files[strings.TrimSuffix(h.Name, "/")] = file{h, data}
		}
		rc.Close()
	}
	return files
}

func checkControllerFiles(t *testing.T, files map[string]file) {
	t.Helper()
	for _, p := range []string{"usr/local/bin/palisade-controller", "usr/bin/ipmitool", "lib64/ld-linux-x86-64.so.2",
		"usr/lib/x86_64-linux-gnu/libfreeipmi.so.17", "usr/lib/x86_64-linux-gnu/libcrypto.so.3", "usr/share/doc/ipmitool/copyright",
		"etc/os-release", "var/lib/dpkg/status.d/ipmitool", sbomPath} {
		if _, ok := files[p]; !ok {
			t.Errorf("controller image: no /%s", p)
		}
	}
	// Nothing of the denied packages, of documentation but copyright, nor of ca-certificates' tools.
	for _, p := range []string{"usr/bin/perl", "usr/bin/dpkg", "usr/bin/deb-systemd-helper", "usr/bin/install-info",
		"usr/share/man", "usr/share/doc/ipmitool/changelog.Debian.gz", "usr/sbin/update-ca-certificates", "var/lib/dpkg/status.d/perl-base"} {
		if _, ok := files[p]; ok {
			t.Errorf("controller image: /%s is there", p)
		}
	}
	if h := files["home/nonroot"].hdr; h == nil || h.Uid != nonrootUID || h.Gid != nonrootUID {
		t.Errorf("controller image: /home/nonroot is %+v, want 65532's", h)
	}
	if !strings.Contains(string(files["etc/passwd"].data), "nonroot:x:65532:65532:") ||
		!strings.Contains(string(files["etc/group"].data), "nonroot:x:65532:") {
		t.Errorf("controller image: /etc/passwd %q, /etc/group %q: no nonroot user", files["etc/passwd"].data, files["etc/group"].data)
	}
	bundle := files[caBundlePath].data
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) || strings.Count(string(bundle), "-----BEGIN CERTIFICATE-----") < 100 {
		t.Errorf("controller image: /%s holds %d bytes, not a bundle of the system's CAs", caBundlePath, len(bundle))
	}
}

func checkAgentFiles(t *testing.T, files map[string]file) {
	t.Helper()
	for _, p := range []string{"usr/local/bin/palisade-agent", "usr/local/bin/palisade-executor", "bin/busybox", "usr/lib/os-release", sbomPath} {
		if f, ok := files[p]; !ok || f.hdr.Typeflag != tar.TypeReg {
			t.Errorf("agent image: no file /%s", p)
		}
	}
	for p, target := range map[string]string{"bin/sh": "busybox", "usr/bin/nsenter": "/bin/busybox"} {
		if f := files[p]; f.hdr == nil || f.hdr.Typeflag != tar.TypeSymlink || f.hdr.Linkname != target {
			t.Errorf("agent image: /%s is not a link to %s", p, target)
		}
	}
	if _, ok := files["usr/bin/ipmitool"]; ok {
		t.Error("agent image: ipmitool is there")
	}
}

// checkSBOM checks the image's SBOM, in the image and beside the tarball: SPDX 2.3, listing
// the given Go modules and Debian packages, every Debian package of the image (its
// status.d), and each Go module at the version the binary records.
func checkSBOM(t *testing.T, b built, files map[string]file, modules, debs []string) {
	t.Helper()
	beside, err := os.ReadFile(b.SBOM)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(beside, files[sbomPath].data) {
		t.Errorf("%s: the SBOM beside the tarball is not the one in the image", b.Spec.Name)
	}
	var doc spdxDocument
	if err := json.Unmarshal(beside, &doc); err != nil {
		t.Fatalf("%s: SBOM: %v", b.Spec.Name, err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Errorf("%s: spdxVersion %q", b.Spec.Name, doc.SPDXVersion)
	}
	listed := map[string]spdxPackage{}
	for _, p := range doc.Packages {
		for _, r := range p.ExternalRefs {
			kind, _, _ := strings.Cut(r.ReferenceLocator, "/")
			listed[kind+" "+p.Name] = p
		}
	}
	for _, m := range modules {
		if p, ok := listed["pkg:golang "+m]; !ok || p.VersionInfo == "" {
			t.Errorf("%s: SBOM lists no Go module %s (with a version)", b.Spec.Name, m)
		}
	}
	if p := listed["pkg:golang github.com/bmc-toolbox/bmclib/v2"]; b.Spec.Name == "palisade-controller" && (p.VersionInfo != "v2.3.5" || len(p.Checksums) != 1) {
		t.Errorf("%s: bmclib/v2 listed as %+v, want v2.3.5 with its go.sum hash", b.Spec.Name, p)
	}
	for _, d := range debs {
		if _, ok := listed["pkg:deb "+d]; !ok {
			t.Errorf("%s: SBOM lists no Debian package %s", b.Spec.Name, d)
		}
	}
	for p := range files {
		if name, ok := strings.CutPrefix(p, "var/lib/dpkg/status.d/"); ok {
			if pkg, ok := listed["pkg:deb "+name]; !ok || !strings.Contains(string(files[p].data), "\nVersion: "+pkg.VersionInfo+"\n") {
				t.Errorf("%s: Debian package %s is in the image, listed in the SBOM as %+v", b.Spec.Name, name, pkg)
			}
		}
	}
	for _, bin := range b.Spec.Binaries {
		found := false
		for _, p := range doc.Packages {
			found = found || (p.Name == bin && p.PrimaryPackagePurpose == "APPLICATION" && len(p.Checksums) == 1 &&
				p.Checksums[0].ChecksumValue == fmt.Sprintf("%x", sha256Of(files["usr/local/bin/"+bin].data)))
		}
		if !found {
			t.Errorf("%s: SBOM lists no binary %s with the digest of the image's", b.Spec.Name, bin)
		}
	}
}
