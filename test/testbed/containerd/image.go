package containerd

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BusyboxPath is Debian busybox-static's binary, the only file of every image built here.
const BusyboxPath = "/bin/busybox"

// Image describes an image built from busybox.
type Image struct {
	// Name is the image reference, e.g. "palisade.test/busybox:1".
	Name string
	// Cmd is the image's default command.
	Cmd []string
	// StopSignal is the image's STOPSIGNAL ("SIGUSR2"), "" for none.
	StopSignal string
	// Files are added to the image as executables: path in the image (e.g.
	// "bin/witness-client") → the host file to copy.
	Files map[string]string
}

// BuildImage writes img as an image tarball (docker-archive format, which ctr imports) to
// path: one layer holding busybox at /bin/busybox, a link for each of its applets, and empty
// /tmp, /etc and /proc directories.
func BuildImage(path string, img Image) error {
	layerTar, err := busyboxLayer(img.Files)
	if err != nil {
		return fmt.Errorf("building image %s: %w", img.Name, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return fmt.Errorf("building image %s: %w", img.Name, err)
	}
	image, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("building image %s: %w", img.Name, err)
	}
	cfg, err := image.ConfigFile()
	if err != nil {
		return fmt.Errorf("building image %s: %w", img.Name, err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Cmd = img.Cmd
	cfg.Config.StopSignal = img.StopSignal
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if image, err = mutate.ConfigFile(image, cfg); err != nil {
		return fmt.Errorf("building image %s: %w", img.Name, err)
	}
	ref, err := name.NewTag(img.Name)
	if err != nil {
		return fmt.Errorf("building image %s: %w", img.Name, err)
	}
	if err := tarball.WriteToFile(path, ref, image); err != nil {
		return fmt.Errorf("writing image %s: %w", img.Name, err)
	}
	return nil
}

// busyboxLayer returns an uncompressed tar of busybox, its applet links, a few directories and
// the extra files.
func busyboxLayer(files map[string]string) ([]byte, error) {
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, fmt.Errorf("reading %s (run make deps): %w", BusyboxPath, err)
	}
	out, err := exec.Command(BusyboxPath, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("listing busybox applets: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	var addDir func(d string) error
	addDir = func(d string) error {
		if d == "." || d == "/" || dirs[d] {
			return nil
		}
		if err := addDir(path.Dir(d)); err != nil { // parents first
			return err
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755})
	}
	for _, d := range []string{"bin", "tmp", "etc", "proc", "sys", "dev"} {
		if err := addDir(d); err != nil {
			return nil, err
		}
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "bin/busybox" {
			continue
		}
		if err := addDir(path.Dir(applet)); err != nil {
			return nil, err
		}
		link := &tar.Header{Typeflag: tar.TypeSymlink, Name: applet, Linkname: "/bin/busybox", Mode: 0o777}
		if err := tw.WriteHeader(link); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		data, err := os.ReadFile(files[name])
		if err != nil {
			return nil, fmt.Errorf("adding %s to the image: %w", name, err)
		}
		name = strings.TrimPrefix(name, "/")
		if err := addDir(path.Dir(name)); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
