package machine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/containerd"
	"palisade.dev/palisade/test/testbed/netns"
)

// PowerSource is the machine's power supply; an ipmisim.BMC implements it.
type PowerSource interface {
	PoweredOn() (bool, error)
}

// Options configure a Machine.
type Options struct {
	// Name is the node's name.
	Name string
	// Index (1–250) is unique among the machines of one LAN: it names the machine's pod
	// bridge and its pod subnet 10.88.<Index>.0/24.
	Index int
	// LAN holds the machine's network namespace.
	LAN *netns.LAN
	// Cluster is the control plane the kubelet joins.
	Cluster *testbed.Cluster
	// APIServer is the API server's address as the machine reaches it: LAN.Relay of the
	// cluster's API server.
	APIServer string
	// Power is polled every PowerPollInterval (default 100ms): the machine runs while it reads
	// on, dies at once when it reads off and boots again when it reads on. Nil: always on.
	Power             PowerSource
	PowerPollInterval time.Duration
	// Images are imported at every boot besides the sandbox image (pods use them with
	// imagePullPolicy Never).
	Images []containerd.Image
	// ImageArchives are image tarballs (docker-archive or OCI, as ctr images import takes
	// them: make images' output) imported at every boot too.
	ImageArchives []string
	// Binds give the machine's mount namespace paths of its own where a real node has them,
	// so that a DaemonSet's hostPath volumes reach this machine's files and not the host's
	// (every machine shares the host's file system): each Bind.Path, created on the host when
	// missing (an empty directory), shows the machine directory Bind.Dir.
	Binds []Bind
	// ClusterDNS is the kubelet's clusterDNS (domain cluster.local), "" for none: the
	// nameserver of pods with dnsPolicy ClusterFirst(WithHostNet).
	ClusterDNS string
	// Labels are the Node's labels, which the kubelet sets when it registers
	// (--node-labels).
	Labels map[string]string
	// Kubelet tunes the kubelet's node status and Lease; the zero value keeps its defaults.
	Kubelet KubeletTuning
	// Daemons start at every boot, after the kubelet.
	Daemons []Daemon
	// Logf receives progress messages.
	Logf func(format string, args ...any)
}

// Bind is a bind mount in a machine's mount namespace.
type Bind struct {
	// Path is where the machine sees it, an absolute path.
	Path string
	// Dir is what it sees there: RunDir (wiped at every boot, where containerd's socket
	// containerd.sock is) or a directory of the machine's disk, which outlives reboots: any
	// other name, relative.
	Dir string
}

// RunDir names the machine's run/ directory in a Bind.
const RunDir = runDir

// Machine is one real node: a network namespace on the LAN, and a PID and mount namespace
// holding its own containerd (with runc and its shims) and a real kubelet. Its power comes
// from Options.Power.
type Machine struct {
	o   Options
	dir string
	net *netns.Node

	mu      sync.Mutex
	init    *exec.Cmd // unshare: its child is the namespaces' PID 1
	initPID int       // the host PID of that PID 1
	bootID  string
	boots   int
	booted  bool // the boot of init is done

	stop chan struct{}
	done chan struct{}
}

// Start creates the machine, boots it when its power is on, and tears it down in t.Cleanup.
func Start(t testing.TB, o Options) *Machine {
	t.Helper()
	m, err := start(t, o)
	if err != nil {
		t.Fatalf("starting machine %s: %v", o.Name, err)
	}
	return m
}

func start(t testing.TB, o Options) (*Machine, error) {
	if err := checkTools(); err != nil {
		return nil, err
	}
	if o.PowerPollInterval <= 0 {
		o.PowerPollInterval = 100 * time.Millisecond
	}
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	// Unix socket paths are limited to 108 bytes: a short directory of its own.
	dir, err := os.MkdirTemp("", "pm-")
	if err != nil {
		return nil, err
	}
	m := &Machine{o: o, dir: dir, net: o.LAN.AddNode(o.Name), stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() {
		if err := m.destroy(); err != nil {
			t.Errorf("tearing machine %s down: %v", o.Name, err)
		}
	})
	if err := m.writeConfig(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := o.Cluster.NodeKubeconfig(ctx, o.Name, o.APIServer, m.path(etcDir, "kubeconfig")); err != nil {
		return nil, err
	}
	if err := m.buildImages(); err != nil {
		return nil, err
	}
	if on, err := m.poweredOn(); err != nil {
		return nil, err
	} else if on {
		if err := m.boot(ctx); err != nil {
			return nil, err
		}
	}
	go m.powerLoop()
	return m, nil
}

func checkTools() error {
	for _, bin := range []string{"nsenter", "unshare", "mount", "containerd", "containerd-shim-runc-v2", "runc", "ctr", "/usr/lib/cni/bridge"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("finding %s (run make deps): %w", bin, err)
		}
	}
	return nil
}

// Name is the node's name.
func (m *Machine) Name() string { return m.o.Name }

// Net is the machine's network namespace: cut it to partition the machine.
func (m *Machine) Net() *netns.Node { return m.net }

// Dir holds the machine's configuration, disk, runtime state and logs.
func (m *Machine) Dir() string { return m.dir }

// BootID is the boot ID of the current (or last) boot, as the kubelet reports it.
func (m *Machine) BootID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bootID
}

// Boots counts the machine's boots.
func (m *Machine) Boots() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boots
}

// Running reports whether the machine is up: powered, and its boot done (kubelet and daemons
// started), so that a test that starts what is missing does not race the boot.
func (m *Machine) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.init != nil && m.booted
}

// powered reports whether the machine's namespaces run (booted or booting).
func (m *Machine) powered() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.init != nil
}

func (m *Machine) poweredOn() (bool, error) {
	if m.o.Power == nil {
		return true, nil
	}
	return m.o.Power.PoweredOn()
}

// powerLoop follows the power: off kills the machine at once, on boots it.
func (m *Machine) powerLoop() {
	defer close(m.done)
	tick := time.NewTicker(m.o.PowerPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		on, err := m.poweredOn()
		if err != nil {
			continue // an unreadable power file changes nothing
		}
		switch running := m.powered(); {
		case !on && running:
			m.o.Logf("machine %s: power lost", m.o.Name)
			if err := m.kill(); err != nil {
				m.o.Logf("machine %s: %v", m.o.Name, err)
			}
		case on && !running:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := m.boot(ctx); err != nil {
				m.o.Logf("machine %s: booting: %v", m.o.Name, err)
			}
			cancel()
		}
	}
}

// boot starts the machine's namespaces with a fresh boot ID and an empty run/, then its
// containerd, imports the images and starts the kubelet.
func (m *Machine) boot(ctx context.Context) error {
	id, err := newBootID()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(m.path(runDir)); err != nil {
		return fmt.Errorf("booting machine %s: %w", m.o.Name, err)
	}
	if err := os.MkdirAll(m.path(runDir), 0o755); err != nil {
		return fmt.Errorf("booting machine %s: %w", m.o.Name, err)
	}
	if err := os.WriteFile(m.path(bootIDFile), []byte(id+"\n"), 0o444); err != nil {
		return fmt.Errorf("booting machine %s: %w", m.o.Name, err)
	}
	if err := m.startInit(); err != nil {
		return err
	}
	m.mu.Lock()
	m.bootID = id
	m.boots++
	boots := m.boots
	m.mu.Unlock()
	m.o.Logf("machine %s: boot %d, boot ID %s", m.o.Name, boots, id)
	if err := m.waitSocket(ctx); err != nil {
		return errors.Join(err, m.kill())
	}
	if err := m.importImages(ctx); err != nil {
		return errors.Join(err, m.kill())
	}
	if err := m.StartKubelet(); err != nil {
		return errors.Join(err, m.kill())
	}
	if err := m.startDaemons(); err != nil {
		return errors.Join(err, m.kill())
	}
	m.mu.Lock()
	m.booted = m.init != nil
	m.mu.Unlock()
	return nil
}

// startInit starts the namespaces' PID 1: a shell in the machine's network namespace and in
// new PID and mount namespaces (private propagation, its own /proc), which puts the boot ID
// over /proc/sys/kernel/random/boot_id — where the kubelet reads it — and runs containerd.
// unshare --kill-child makes the shell die with unshare, and every process of a PID
// namespace dies with its PID 1: killing unshare is the power cut.
func (m *Machine) startInit() error {
	script := fmt.Sprintf(`mount --bind %s /proc/sys/kernel/random/boot_id || exit 1
%scontainerd --config %s >>%s 2>&1 &
while :; do wait; sleep 1; done`, m.path(bootIDFile), m.bindScript(), m.path(etcDir, "containerd.toml"), m.path(logDir, "containerd.log"))
	cmd := exec.Command("nsenter", "--net="+m.net.NetNSPath(), "--",
		"unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "--mount-proc",
		"/bin/sh", "-c", script)
	log, err := os.OpenFile(m.path(logDir, "init.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("booting machine %s: %w", m.o.Name, err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("booting machine %s: %w", m.o.Name, err)
	}
	pid, err := waitChild(cmd.Process.Pid, 5*time.Second)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("booting machine %s: %w\n%s", m.o.Name, err, testbed.TailFile(m.path(logDir, "init.log"), 10))
	}
	go func() { _ = cmd.Wait() }()
	m.mu.Lock()
	m.init, m.initPID = cmd, pid
	m.mu.Unlock()
	return nil
}

// bindScript is the init script's lines for Options.Binds.
func (m *Machine) bindScript() string {
	var b strings.Builder
	for _, bd := range m.o.Binds {
		dir := m.path(bd.Dir)
		if bd.Dir != runDir {
			dir = m.path(diskDir, bd.Dir)
		}
		fmt.Fprintf(&b, "mkdir -p %s %s && mount --bind %s %s || exit 1\n", dir, bd.Path, dir, bd.Path)
	}
	return b.String()
}

func (m *Machine) waitSocket(ctx context.Context) error {
	for {
		if _, err := os.Stat(m.socket()); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("booting machine %s: waiting for containerd's socket: %w\n%s", m.o.Name, ctx.Err(), testbed.TailFile(m.path(logDir, "containerd.log"), 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// buildImages writes the image tarballs once; every boot imports them.
func (m *Machine) buildImages() error {
	if err := os.MkdirAll(m.path(diskDir, "images"), 0o755); err != nil {
		return err
	}
	for i, img := range append([]containerd.Image{containerd.Sandbox}, m.o.Images...) {
		if err := containerd.BuildImage(m.path(diskDir, "images", fmt.Sprintf("%d.tar", i)), img); err != nil {
			return err
		}
	}
	for i, a := range m.o.ImageArchives {
		abs, err := filepath.Abs(a)
		if err != nil {
			return err
		}
		if err := os.Symlink(abs, m.path(diskDir, "images", fmt.Sprintf("archive-%d.tar", i))); err != nil {
			return fmt.Errorf("machine %s: image archive %s: %w", m.o.Name, a, err)
		}
	}
	return nil
}

// importImages imports the images into the machine's containerd through its socket (ctr
// runs outside the machine: the socket is a file on the machine's disk).
func (m *Machine) importImages(ctx context.Context) error {
	tars, err := filepath.Glob(m.path(diskDir, "images", "*.tar"))
	if err != nil {
		return err
	}
	for _, tar := range tars {
		var out []byte
		for {
			out, err = exec.CommandContext(ctx, "ctr", "--address", m.socket(), "--namespace", containerd.Namespace,
				"images", "import", "--snapshotter", "native", tar).CombinedOutput()
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond) // the socket exists a moment before containerd serves
		}
		if err != nil {
			return fmt.Errorf("booting machine %s: importing %s: %w: %s", m.o.Name, tar, err, out)
		}
	}
	return nil
}

// StartKubelet starts the machine's kubelet (boot does; after KillKubelet, the test does).
func (m *Machine) StartKubelet() error {
	bin, err := testbed.Binary("kubelet")
	if err != nil {
		return err
	}
	return m.startProcess("kubelet", bin,
		"--config="+m.path(etcDir, "kubelet.yaml"), "--kubeconfig="+m.path(etcDir, "kubeconfig"),
		"--hostname-override="+m.o.Name, "--node-ip="+m.net.IP(),
		"--root-dir="+m.path(diskDir, "kubelet"), "--cert-dir="+m.path(diskDir, "kubelet", "pki"),
		"--node-labels="+labels(m.o.Labels), "--v=2")
}

// startProcess starts bin inside the running machine, its output appended to the log name.
func (m *Machine) startProcess(name, bin string, args ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.init == nil {
		return fmt.Errorf("starting %s on machine %s: the machine is off", name, m.o.Name)
	}
	log, err := os.OpenFile(m.path(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("starting %s on machine %s: %w", name, m.o.Name, err)
	}
	defer log.Close()
	cmd := exec.Command("nsenter", append(m.enter(), append([]string{bin}, args...)...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s on machine %s: %w", name, m.o.Name, err)
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// enter is nsenter's arguments to run a program inside the running machine: its network,
// PID and mount namespaces. Callers hold mu.
func (m *Machine) enter() []string {
	return []string{"--target", fmt.Sprint(m.initPID), "--net", "--pid", "--mount", "--"}
}

// Command runs a program inside the machine (network, PID and mount namespaces).
func (m *Machine) Command(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.init == nil {
		return nil, fmt.Errorf("running %s on machine %s: the machine is off", name, m.o.Name)
	}
	return exec.CommandContext(ctx, "nsenter", append(m.enter(), append([]string{name}, args...)...)...), nil
}

// KillKubelet kills the machine's kubelet alone (SIGKILL): "kubelet down". Its containers
// keep running.
func (m *Machine) KillKubelet() error { return m.killComm("kubelet", "the kubelet") }

// Reset is a watchdog's reset: every process of the machine dies at once, as at a power cut,
// and, its power staying on, the machine boots again at the power loop's next look. A machine
// that is off stays off (a watchdog does not run without power).
func (m *Machine) Reset() error {
	if !m.powered() {
		return nil
	}
	m.o.Logf("machine %s: reset", m.o.Name)
	return m.kill()
}

// kill is the power cut: unshare dies, its child (PID 1) with it, and every process of the
// machine's PID namespace with that. It returns once none is left.
func (m *Machine) kill() error {
	m.mu.Lock()
	init, initPID := m.init, m.initPID
	m.init, m.initPID, m.booted = nil, 0, false
	m.mu.Unlock()
	if init == nil {
		return nil
	}
	pids, _ := processesIn(initPID, "")
	_ = syscall.Kill(initPID, syscall.SIGKILL)
	_ = init.Process.Kill()
	if err := waitGone(append(pids, initPID), 10*time.Second); err != nil {
		return fmt.Errorf("cutting the power of machine %s: %w", m.o.Name, err)
	}
	return nil
}

// Processes lists the host PIDs of the machine's processes whose command name is comm (all
// of them with comm "").
func (m *Machine) Processes(comm string) ([]int, error) {
	m.mu.Lock()
	initPID := m.initPID
	m.mu.Unlock()
	if initPID == 0 {
		return nil, nil
	}
	return processesIn(initPID, comm)
}

// destroy stops following the power, kills the machine and removes its files and namespace.
func (m *Machine) destroy() error {
	close(m.stop)
	<-m.done
	errs := []error{m.kill()}
	errs = append(errs, removeCgroups(m.dir))
	errs = append(errs, os.RemoveAll(m.dir))
	return errors.Join(errs...)
}

// labels is the --node-labels value: k=v pairs, sorted.
func labels(l map[string]string) string {
	pairs := make([]string, 0, len(l))
	for k, v := range l {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

func newBootID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
}

// LogTail returns the last n lines of one of the machine's logs: "kubelet", "containerd",
// "init" or a daemon's name.
func (m *Machine) LogTail(name string, n int) string {
	return testbed.TailFile(m.path(logDir, name+".log"), n)
}

// Controllers are the kube-controller-manager controllers pods on real kubelets need beyond
// testbed.DefaultControllers: the default ServiceAccount of each namespace and the
// kube-root-ca.crt ConfigMap every projected service-account volume mounts.
var Controllers = []string{"serviceaccount-controller", "root-ca-certificate-publisher-controller"}
