package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Users of the images: root, and the unprivileged user of distroless images.
const (
	nonrootUID = 65532
	binDir     = "usr/local/bin"
	// imagePath is PATH in both images: the controller runs ipmitool (the chart passes
	// --ipmitool ipmitool) and the agent /bin/sh and nsenter through it.
	imagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// spec is what goes into one image.
type spec struct {
	Name, Description string
	// Binaries are commands of the module (./cmd/<name>), installed in /usr/local/bin; the
	// first is the entrypoint.
	Binaries []string
	// Closure are Debian packages installed with everything they Depend or Pre-Depend on
	// (the denied packages aside); Standalone are installed without their dependencies.
	Closure, Standalone []string
	// User is the image's numeric user:group.
	User string
	// Links are symbolic links to add: path in the image → target.
	Links map[string]string
}

// specs are the images `make images` builds.
var specs = []spec{{
	Name:        "palisade-controller",
	Description: "Palisade's fencing controller, with ipmitool for bmclib's IPMI provider",
	Binaries:    []string{"palisade-controller"},
	// ipmitool and its shared libraries; the system's CAs for Redfish BMCs, AWS and vCenter;
	// base-files for /etc/os-release, which scanners read.
	Closure:    []string{"ipmitool"},
	Standalone: []string{"base-files", "ca-certificates"},
	User:       fmt.Sprintf("%d:%d", nonrootUID, nonrootUID),
}, {
	Name:        "palisade-agent",
	Description: "Palisade's node agent, with its termination executor palisade-executor",
	Binaries:    []string{"palisade-agent", "palisade-executor"},
	// The executor runs --kubelet-stop-command with /bin/sh -c, and the chart's default is
	// `nsenter -t 1 -m -- systemctl stop kubelet`: busybox (static) gives both; its other
	// applets run as `busybox <applet>`.
	Standalone: []string{"base-files", "busybox-static"},
	Links:      map[string]string{"bin/sh": "busybox", "usr/bin/nsenter": "/bin/busybox"},
	// Root: it stops containers through the node's container runtime and reads /proc.
	User: "0:0",
}}

// keepDebFile says which files of a Debian package go into an image: everything but manual
// pages, info pages, lintian overrides and documentation, whose copyright files stay.
func keepDebFile(p string, typ byte) bool {
	for _, dir := range []string{"usr/share/man", "usr/share/info", "usr/share/lintian"} {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return false
		}
	}
	if doc, ok := strings.CutPrefix(p, "usr/share/doc/"); ok {
		pkg, file, nested := strings.Cut(doc, "/")
		return pkg != "" && (!nested || (file == "copyright" && typ == tar.TypeReg))
	}
	return true
}

// debFiles returns the files of a Debian package that go into an image. ca-certificates is
// installed as its postinst leaves a fresh system, without its tools: the bundle of every
// certificate (caBundle), and its copyright.
func debFiles(ctx context.Context, d debPackage) (tree, error) {
	files := tree{}
	keep := keepDebFile
	if d.Name == "ca-certificates" {
		keep = func(string, byte) bool { return true }
	}
	if err := fsysTar(ctx, d, func(r io.Reader) error { return files.addTar(r, d.Name, keep) }); err != nil {
		return nil, err
	}
	if d.Name != "ca-certificates" {
		return files, nil
	}
	bundle, err := caBundle(files)
	if err != nil {
		return nil, err
	}
	installed := tree{caBundlePath: {typ: tar.TypeReg, mode: 0o644, data: bundle, from: d.Name}}
	for p, n := range files {
		if strings.HasPrefix(p, "usr/share/doc/") && keepDebFile(p, n.typ) {
			installed[p] = n
		}
	}
	return installed, nil
}

// baseLayer holds the Debian packages, their dpkg status (var/lib/dpkg/status.d, where
// scanners read what is installed), the users and the spec's links. It returns the
// distribution too, from base-files' os-release ("debian-12").
func baseLayer(ctx context.Context, s spec, debs []debPackage, epoch time.Time) ([]byte, string, error) {
	t := tree{}
	for _, d := range debs {
		files, err := debFiles(ctx, d)
		if err != nil {
			return nil, "", err
		}
		for p, n := range files {
			if err := t.add(p, n); err != nil {
				return nil, "", fmt.Errorf("installing %s in %s: %w", d.Name, s.Name, err)
			}
		}
		status := append(bytes.TrimRight(d.Control, "\n"), "\nStatus: install ok installed\n"...)
		t.put("var/lib/dpkg/status.d/"+d.Name, &node{typ: tar.TypeReg, mode: 0o644, data: status, from: d.Name})
	}
	for p, target := range s.Links {
		if err := t.add(p, &node{typ: tar.TypeSymlink, mode: 0o777, link: target, from: s.Name}); err != nil {
			return nil, "", err
		}
	}
	for p, n := range systemFiles() {
		t.put(p, n)
	}
	distro := "debian"
	if n, ok := t["usr/lib/os-release"]; ok {
		distro = osRelease(n.data)
	}
	layer, err := t.layerBytes(epoch)
	return layer, distro, err
}

// systemFiles are the users root and nonroot (65532, as in distroless images) with their
// homes, name resolution through files then DNS, and a /tmp everyone may write.
func systemFiles() tree {
	file := func(data string) *node {
		return &node{typ: tar.TypeReg, mode: 0o644, data: []byte(data), from: "palisade-images"}
	}
	return tree{
		"etc/passwd":        file(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonrootUID, nonrootUID)),
		"etc/group":         file(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonrootUID)),
		"etc/nsswitch.conf": file("passwd: files\ngroup: files\nhosts: files dns\n"),
		"root":              {typ: tar.TypeDir, mode: 0o700, from: "palisade-images"},
		"home/nonroot":      {typ: tar.TypeDir, mode: 0o700, uid: nonrootUID, gid: nonrootUID, from: "palisade-images"},
		"tmp":               {typ: tar.TypeDir, mode: 0o1777, from: "palisade-images"},
	}
}

// appLayer holds the spec's binaries in /usr/local/bin and the SBOM.
func appLayer(s spec, bins map[string][]byte, sbomJSON []byte, epoch time.Time) ([]byte, error) {
	t := tree{sbomPath: {typ: tar.TypeReg, mode: 0o644, data: sbomJSON, from: "palisade-images"}}
	for _, b := range s.Binaries {
		t.put(path.Join(binDir, b), &node{typ: tar.TypeReg, mode: 0o755, data: bins[b], from: b})
	}
	return t.layerBytes(epoch)
}

// metadata is what the labels and the SBOM say about the build.
type metadata struct {
	Version, Revision, Source, Licenses string
	Epoch                               time.Time
}

// labels are the OCI annotations of the image's configuration; licenses only when known.
func labels(s spec, m metadata) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       s.Name,
		"org.opencontainers.image.description": s.Description,
		"org.opencontainers.image.version":     m.Version,
		"org.opencontainers.image.revision":    m.Revision,
		"org.opencontainers.image.created":     m.Epoch.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":      m.Source,
		"org.opencontainers.image.vendor":      "Palisade",
	}
	if m.Licenses != "" {
		l["org.opencontainers.image.licenses"] = m.Licenses
	}
	return l
}

// assemble makes the image: the base and application layers, and a configuration whose every
// time is the epoch.
func assemble(s spec, m metadata, base, app []byte) (v1.Image, error) {
	created := v1.Time{Time: m.Epoch.UTC()}
	cfg := &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      created,
		RootFS:       v1.RootFS{Type: "layers"}, // docker load refuses any other
		Config: v1.Config{
			User:       s.User,
			Entrypoint: []string{"/" + path.Join(binDir, s.Binaries[0])},
			Env:        []string{"PATH=" + imagePath},
			WorkingDir: "/",
			Labels:     labels(s, m),
		},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	for _, l := range []struct {
		data []byte
		what string
	}{{base, "Debian packages and users"}, {app, strings.Join(s.Binaries, ", ") + " and the SBOM"}} {
		data := l.data
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer,
			History: v1.History{Created: created, CreatedBy: "palisade-images: " + l.what}})
		if err != nil {
			return nil, err
		}
	}
	return img, nil
}
