package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lockPath serialises LAN creation across processes (leftover removal and subnet choice).
const lockPath = "/run/lock/palisade-netns.lock"

// tools are the absolute paths of ip and nft.
type tools struct{ ipPath, nftPath string }

// findTools checks for root and finds ip and nft, also in the sbin directories a non-login
// PATH may lack.
func findTools() (tools, error) {
	if os.Geteuid() != 0 {
		return tools{}, fmt.Errorf("network namespaces need root (running as uid %d): run the tests as root", os.Geteuid())
	}
	var tl tools
	for _, x := range []struct {
		name, pkg string
		path      *string
	}{{"ip", "iproute2", &tl.ipPath}, {"nft", "nftables", &tl.nftPath}} {
		p, err := lookPath(x.name)
		if err != nil {
			return tools{}, fmt.Errorf("finding %s: %w; install Debian %s (make deps)", x.name, err, x.pkg)
		}
		*x.path = p
	}
	return tl, nil
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not in PATH, /usr/sbin or /sbin", name)
}

// ip runs ip with args and returns its output in the error when it fails.
func (tl tools) ip(args ...string) error {
	out, err := exec.Command(tl.ipPath, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("running ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// nft feeds script to nft inside namespace ns.
func (tl tools) nft(ns, script string) error {
	cmd := exec.Command(tl.ipPath, "netns", "exec", ns, tl.nftPath, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("applying nftables rules in namespace %s: %w: %s\n%s", ns, err, bytes.TrimSpace(out), script)
	}
	return nil
}

// deleteLink deletes a root-namespace link (and so its veth peer) when it exists.
func (tl tools) deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	if err := tl.ip("link", "delete", name); err != nil && !missing(err) {
		return err
	}
	return nil
}

// deleteNS kills the processes left in namespace ns (never this one), then deletes it. A
// missing namespace is not an error.
func (tl tools) deleteNS(ns string, logf func(string, ...any)) error {
	if _, err := os.Stat(filepath.Join(netnsDir, ns)); err != nil {
		return nil
	}
	if err := tl.killProcesses(ns, logf); err != nil {
		return err
	}
	return tl.ip("netns", "delete", ns)
}

// killProcesses SIGKILLs the processes in namespace ns other than this one and waits up to
// 5s for them to go.
func (tl tools) killProcesses(ns string, logf func(string, ...any)) error {
	deadline := time.Now().Add(5 * time.Second)
	for first := true; ; first = false {
		pids, err := tl.pids(ns)
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v in namespace %s survived SIGKILL", pids, ns)
		}
		for _, pid := range pids {
			if first {
				logf("killing process %d left in namespace %s", pid, ns)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tl tools) pids(ns string) ([]int, error) {
	out, err := exec.Command(tl.ipPath, "netns", "pids", ns).Output()
	if err != nil {
		return nil, fmt.Errorf("listing processes in namespace %s: %w", ns, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// freeSubnet returns the lowest k such that no root-namespace address is in 10.231.k.0/24.
func (tl tools) freeSubnet() (int, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return 0, fmt.Errorf("listing addresses: %w", err)
	}
	used := map[int]bool{}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil && fmt.Sprintf("%d.%d", ip4[0], ip4[1]) == subnetBase {
			used[int(ip4[2])] = true
		}
	}
	for k := range 256 {
		if !used[k] {
			return k, nil
		}
	}
	return 0, fmt.Errorf("every subnet %s.0.0/16 is in use: remove the leftover interfaces (ip -o addr | grep %s.)", subnetBase, subnetBase)
}

// lockMachine takes the machine-wide lock; the returned function releases it.
func lockMachine() (func(), error) {
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o755); err != nil {
		return nil, fmt.Errorf("creating lock directory: %w", err)
	}
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", lockPath, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", lockPath, err)
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// leftoverName matches the names New gives; group 1 is the creating process's ID in base 36.
var leftoverName = regexp.MustCompile(`^` + namePrefix + `([0-9a-z]{1,7})-[0-9a-z]+(h|-lan|-n[0-9]+)$`)

// ownerGone reports whether name is one of ours whose creating process no longer exists.
func ownerGone(name string) bool {
	m := leftoverName.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.ParseInt(m[1], 36, 64)
	if err != nil || pid <= 0 || pid > 1<<31-1 {
		return false
	}
	_, err = os.Stat("/proc/" + strconv.FormatInt(pid, 10))
	return errors.Is(err, os.ErrNotExist)
}

// removeLeftovers deletes the root-namespace links, then the namespaces, of LANs whose
// process is gone (a test binary that crashed or was killed before its cleanup).
func removeLeftovers(tl tools, logf func(string, ...any)) error {
	var errs []error
	ifaces, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("listing links: %w", err)
	}
	for _, iface := range ifaces {
		if ownerGone(iface.Name) {
			logf("removing leftover link %s", iface.Name)
			errs = append(errs, tl.deleteLink(iface.Name))
		}
	}
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	for _, e := range entries {
		if ownerGone(e.Name()) {
			logf("removing leftover namespace %s", e.Name())
			if err := tl.ip("-n", e.Name(), "link", "delete", nodeIface); err != nil && !missing(err) {
				errs = append(errs, err)
			}
			errs = append(errs, tl.deleteNS(e.Name(), logf))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing leftovers of earlier runs: %w", err)
	}
	return nil
}

// missing reports whether an ip error says the link or namespace does not exist.
func missing(err error) bool {
	return strings.Contains(err.Error(), "Cannot find device") || strings.Contains(err.Error(), "No such file")
}
