package machine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// waitChild returns the first child of pid (unshare's forked PID 1), waiting up to timeout.
func waitChild(pid int, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				return strconv.Atoi(f[0])
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the machine's init did not start within %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processesIn lists the host PIDs of the processes in the PID namespace of initPID (nested
// namespaces, the containers', included) whose command name is comm ("" for all); zombies are
// left out.
func processesIn(initPID int, comm string) ([]int, error) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPID))
	if err != nil {
		return nil, fmt.Errorf("reading the machine's PID namespace: %w", err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == initPID {
			continue
		}
		if !inNamespace(pid, ns) || zombie(pid) {
			continue // a zombie is dead, only not yet reaped: KillDaemon's waitGone returns then
		}
		if comm != "" {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err != nil || strings.TrimSpace(string(b)) != comm {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// inNamespace reports whether pid lives in the PID namespace ns or in one nested in it. A
// process's NSpid line lists its PID in each namespace from the host's down; a process of
// the machine (or of a container in it) has the machine's namespace among its ancestors,
// which /proc/PID/ns/pid alone does not show for nested ones: walk up the parents instead.
func inNamespace(pid int, ns string) bool {
	for p := pid; p > 1; {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p)); err == nil && link == ns {
			return true
		}
		pp, err := parent(p)
		if err != nil {
			return false
		}
		p = pp
	}
	return false
}

func parent(pid int) (int, error) {
	f, err := statFields(pid)
	if err != nil || len(f) < 2 {
		return 0, fmt.Errorf("parsing /proc/%d/stat: %v", pid, err)
	}
	return strconv.Atoi(f[1])
}

// statFields are the fields of /proc/PID/stat after the command name (state first), which
// may hold spaces and parentheses: the fields after the last ')'.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:]), nil
}

// waitGone waits until none of pids exists any more.
func waitGone(pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, pid := range pids {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil && !zombie(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still alive after %s", left, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func zombie(pid int) bool {
	f, err := statFields(pid)
	return err != nil || len(f) > 0 && f[0] == "Z"
}

// removeCgroups removes the cgroups runc made for the machine's containers: the cgroup v1
// directories whose name is a container ID that containerd kept under the machine's
// directory (its runc root lists them).
func removeCgroups(dir string) error {
	ids, _ := filepath.Glob(filepath.Join(dir, diskDir, "containerd", "root", "io.containerd.runtime.v2.task", "*", "*"))
	var errs []error
	for _, p := range ids {
		id := filepath.Base(p)
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "*", id))
		more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", id))
		for _, d := range append(dirs, more...) {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
