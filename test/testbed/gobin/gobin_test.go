package gobin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// Concurrent builds of one command share one binary that runs; another environment is
// another build.
func TestBuildOncePerProcess(t *testing.T) {
	var wg sync.WaitGroup
	paths := make([]string, 4)
	for i := range paths {
		wg.Go(func() {
			p, err := Build("test/cmd/witness-client", "CGO_ENABLED=0")
			if err != nil {
				t.Error(err)
			}
			paths[i] = p
		})
	}
	wg.Wait()
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("built twice: %s and %s", paths[0], p)
		}
	}
	fi, err := os.Stat(paths[0])
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s: not an executable (%v)", paths[0], err)
	}
	if filepath.Base(paths[0]) != "witness-client" {
		t.Errorf("%s: not the command's own name", paths[0])
	}
	if filepath.Base(filepath.Dir(filepath.Dir(paths[0]))) != dirPrefix+strconv.Itoa(os.Getpid()) {
		t.Errorf("%s is not in this process's directory", paths[0])
	}
	other, err := Build("test/cmd/witness-client")
	if err != nil {
		t.Fatal(err)
	}
	if other == paths[0] {
		t.Errorf("another environment shared the binary %s", other)
	}
}

// The directory of a process that is gone is removed; a living process's is kept.
func TestProcessDirRemovesTheDeadsOnly(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(tmp, dirPrefix+strconv.Itoa(cmd.Process.Pid))
	alive := filepath.Join(tmp, dirPrefix+"1") // init lives as long as the machine
	for _, d := range []string{dead, alive} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d, err := processDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the directory of exited process %d is still there (%v)", cmd.Process.Pid, err)
	}
	if _, err := os.Stat(alive); err != nil {
		t.Errorf("the directory of living process 1 was removed: %v", err)
	}
	if _, err := os.Stat(d); err != nil {
		t.Errorf("own directory %s: %v", d, err)
	}
}

// BuildAll puts the commands side by side under their own names.
func TestBuildAllSideBySide(t *testing.T) {
	dir, err := BuildAll([]string{"CGO_ENABLED=0"}, "test/cmd/witness-client", "test/cmd/csi-node")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"witness-client", "csi-node"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s not built in %s: %v", name, dir, err)
		}
	}
}
