// Package gobin builds the module's commands for tests, once per test process: a scene that
// runs palisade-controller, palisade-agent or a test helper takes the binary built by the
// first scene of its process instead of linking it again (palisade-controller alone takes
// about 7 s of a core to link, and a chaos batch or the e2e package starts dozens of scenes).
//
// The binaries live in a directory of the process (palisade-bin-<pid> in the temporary
// directory). No hook runs when a test process ends, so the first build of a process removes
// the directories of processes that no longer exist.
package gobin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

const dirPrefix = "palisade-bin-"

var (
	mu     sync.Mutex
	builds = map[string]func() (string, error){}
	dir    = sync.OnceValues(processDir)
)

// Build returns the path of the module's command in pkg (a path from the module's root, such
// as "cmd/palisade-agent"), built with env added to the environment ("CGO_ENABLED=0"); the
// first call of a process with these arguments builds it, the others wait for that build and
// share its result. It is safe for concurrent use.
func Build(pkg string, env ...string) (string, error) {
	dir, err := BuildAll(env, pkg)
	return filepath.Join(dir, filepath.Base(pkg)), err
}

// BuildAll builds the commands in pkgs into one directory, which it returns: each keeps its
// own name there, for programs that look for a sibling (palisade-agent finds palisade-executor
// next to itself). Like Build, once per process for the same arguments.
func BuildAll(env []string, pkgs ...string) (string, error) {
	key := strings.Join(pkgs, "\x00") + "\x01" + strings.Join(env, "\x00")
	mu.Lock()
	b, ok := builds[key]
	if !ok {
		n := len(builds)
		b = sync.OnceValues(func() (string, error) { return build(pkgs, env, n) })
		builds[key] = b
	}
	mu.Unlock()
	return b()
}

func build(pkgs, env []string, n int) (string, error) {
	d, err := dir()
	if err != nil {
		return "", err
	}
	sub := filepath.Join(d, strconv.Itoa(n))
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return "", fmt.Errorf("building %s: %w", strings.Join(pkgs, ", "), err)
	}
	args := []string{"build", "-o", sub + string(filepath.Separator)}
	for _, p := range pkgs {
		args = append(args, "./"+filepath.ToSlash(p))
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = ModuleDir()
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", strings.Join(pkgs, ", "), err, out)
	}
	return sub, nil
}

// processDir makes this process's directory after removing those of processes gone.
func processDir() (string, error) {
	tmp := os.TempDir()
	old, _ := filepath.Glob(filepath.Join(tmp, dirPrefix+"*"))
	for _, d := range old {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), dirPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); errors.Is(err, os.ErrNotExist) {
			_ = os.RemoveAll(d)
		}
	}
	d := filepath.Join(tmp, dirPrefix+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("making the directory of built commands: %w", err)
	}
	return d, nil
}

// ModuleDir is the module's root, from this file's place in it.
func ModuleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}
