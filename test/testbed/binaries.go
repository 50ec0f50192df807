package testbed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnvBinDir names the environment variable holding the directory with the control-plane
// binaries (the Makefile exports it; `make testbed` builds them).
const EnvBinDir = "PALISADE_TESTBED_BIN"

const (
	etcdBinary      = "etcd"
	apiServerBinary = "kube-apiserver"
	kcmBinary       = "kube-controller-manager"
	schedulerBinary = "kube-scheduler"
	// csiAttacherBinary is the CSI external-attacher (cmd/csi-attacher).
	csiAttacherBinary = "csi-attacher"
	// csiAddonsManagerBinary and csiAddonsSidecarBinary are kubernetes-csi-addons'
	// cmd/manager and sidecar, needed with Options.CSIAddons.
	csiAddonsManagerBinary = "csi-addons-manager"
	csiAddonsSidecarBinary = "csi-addons-sidecar"
)

// binaries are the paths of the control-plane programs.
type binaries struct {
	etcd, apiServer, kcm, scheduler, csiAttacher string
	csiAddonsManager, csiAddonsSidecar           string
}

// findBinaries locates the control-plane binaries in $PALISADE_TESTBED_BIN, csi-attacher
// among them when withCSI, the csi-addons manager and sidecar when withCSIAddons.
func findBinaries(withCSI, withCSIAddons bool) (binaries, error) {
	dir := os.Getenv(EnvBinDir)
	if dir == "" {
		return binaries{}, fmt.Errorf("finding control-plane binaries: $%s is not set; run `make testbed` "+
			"and run the tests through make (or export %s=<the dir it prints>)", EnvBinDir, EnvBinDir)
	}
	b := binaries{
		etcd:      filepath.Join(dir, etcdBinary),
		apiServer: filepath.Join(dir, apiServerBinary),
		kcm:       filepath.Join(dir, kcmBinary),
		scheduler: filepath.Join(dir, schedulerBinary),
	}
	want := []string{b.etcd, b.apiServer, b.kcm, b.scheduler}
	if withCSI {
		b.csiAttacher = filepath.Join(dir, csiAttacherBinary)
		want = append(want, b.csiAttacher)
	}
	if withCSIAddons {
		b.csiAddonsManager = filepath.Join(dir, csiAddonsManagerBinary)
		b.csiAddonsSidecar = filepath.Join(dir, csiAddonsSidecarBinary)
		want = append(want, b.csiAddonsManager, b.csiAddonsSidecar)
	}
	var errs []error
	for _, p := range want {
		if err := checkExecutable(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return binaries{}, fmt.Errorf("finding control-plane binaries in %s=%s (run `make testbed`): %w", EnvBinDir, dir, err)
	}
	return b, nil
}

func checkExecutable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// defaultCRDDirs returns <module root>/charts/palisade/files/crds (the CRDs `make generate`
// writes, which the chart renders) when it exists.
func defaultCRDDirs() []string {
	root, err := moduleRoot()
	if err != nil {
		return nil
	}
	dir := filepath.Join(root, "charts", "palisade", "files", "crds")
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return nil
	}
	return []string{dir}
}

// moduleRoot walks up from the working directory to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding module root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Binary is the path of one of the test bed's programs in $PALISADE_TESTBED_BIN (e.g.
// "kubelet"), checked to be executable.
func Binary(name string) (string, error) {
	dir := os.Getenv(EnvBinDir)
	if dir == "" {
		return "", fmt.Errorf("finding %s: $%s is not set; run `make testbed` and run the tests through make", name, EnvBinDir)
	}
	p := filepath.Join(dir, name)
	if err := checkExecutable(p); err != nil {
		return "", fmt.Errorf("finding %s in %s=%s (run `make testbed`): %w", name, EnvBinDir, dir, err)
	}
	return p, nil
}
