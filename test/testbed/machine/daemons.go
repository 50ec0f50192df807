package machine

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Daemon is a program a machine starts at every boot after its kubelet, inside the machine
// (its network, PID and mount namespaces), as a node's init system starts its agents: it dies
// with the power and starts again at the next boot, but not when it crashes — KillDaemon is
// such a crash, and StartDaemon the operator starting it again.
type Daemon struct {
	// Name names it to KillDaemon and StartDaemon, and its log: LogTail(Name).
	Name string
	// Path is the program; its first 15 bytes are the command name KillDaemon looks for.
	Path string
	// Args may name the machine's $(NODE_NAME), $(NODE_IP), $(CONTAINERD_SOCKET), $(KUBELET_DIR)
	// (the kubelet's root directory), $(STATE_DIR) (a directory of the machine's disk, which
	// outlives reboots) and $(RUN_DIR) (wiped at every boot, short enough for sockets), which
	// are replaced as Kubernetes replaces them in a container's arguments.
	Args []string
}

// args is d's arguments with the machine's variables replaced.
func (m *Machine) args(d Daemon) []string {
	r := strings.NewReplacer("$(NODE_NAME)", m.o.Name, "$(NODE_IP)", m.net.IP(), "$(CONTAINERD_SOCKET)", m.socket(),
		"$(KUBELET_DIR)", m.path(diskDir, "kubelet"), "$(STATE_DIR)", m.path(diskDir, "state"), "$(RUN_DIR)", m.path(runDir))
	out := make([]string, len(d.Args))
	for i, a := range d.Args {
		out[i] = r.Replace(a)
	}
	return out
}

func (m *Machine) startDaemons() error {
	for _, d := range m.o.Daemons {
		if err := m.startProcess(d.Name, d.Path, m.args(d)...); err != nil {
			return err
		}
	}
	return nil
}

// StartDaemon starts the named daemon (boot does; after KillDaemon, the test does).
func (m *Machine) StartDaemon(name string) error {
	d, err := m.daemon(name)
	if err != nil {
		return err
	}
	return m.startProcess(d.Name, d.Path, m.args(d)...)
}

// KillDaemon kills the named daemon alone (SIGKILL), and with it whatever runs under the same
// command name; children of its own with other names (an executor it started) live on.
func (m *Machine) KillDaemon(name string) error {
	d, err := m.daemon(name)
	if err != nil {
		return err
	}
	return m.killComm(comm(d.Path), "daemon "+name)
}

// StopDaemon stops the named daemon gracefully (SIGTERM, as a pod's deletion does) and waits
// until it is gone; like KillDaemon, it is not started again before the next boot or StartDaemon.
func (m *Machine) StopDaemon(name string) error {
	d, err := m.daemon(name)
	if err != nil {
		return err
	}
	return m.signalComm(comm(d.Path), "daemon "+name, syscall.SIGTERM)
}

// DaemonRunning says whether the named daemon's process runs.
func (m *Machine) DaemonRunning(name string) bool {
	d, err := m.daemon(name)
	if err != nil {
		return false
	}
	pids, err := m.Processes(comm(d.Path))
	return err == nil && len(pids) > 0
}

func (m *Machine) daemon(name string) (Daemon, error) {
	for _, d := range m.o.Daemons {
		if d.Name == name {
			return d, nil
		}
	}
	return Daemon{}, fmt.Errorf("machine %s has no daemon %q", m.o.Name, name)
}

// killComm SIGKILLs the machine's processes named comm and waits until they are gone.
func (m *Machine) killComm(comm, what string) error {
	return m.signalComm(comm, what, syscall.SIGKILL)
}

// signalComm sends sig to the machine's processes named comm and waits until they are gone.
func (m *Machine) signalComm(comm, what string, sig syscall.Signal) error {
	pids, err := m.Processes(comm)
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		return fmt.Errorf("signalling %s of machine %s (%s): it does not run", what, m.o.Name, sig)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	return waitGone(pids, 10*time.Second)
}

// comm is the kernel's command name of a program: its file name, cut to 15 bytes.
func comm(path string) string {
	c := filepath.Base(path)
	if len(c) > 15 {
		c = c[:15]
	}
	return c
}
