package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	cri "k8s.io/cri-client/pkg"
)

const (
	// Namespace is the containerd namespace of the CRI plugin.
	Namespace = "k8s.io"
	// SandboxImage is the sandbox image the configuration names: a busybox image built and
	// imported by Start, since registry.k8s.io cannot be reached. Its process sleeps forever.
	SandboxImage = "registry.k8s.io/pause:3.6"
)

// Sandbox is the sandbox image: busybox sleeping forever, under the name of the pause image.
var Sandbox = Image{Name: SandboxImage, Cmd: []string{"/bin/sleep", "2147483647"}}

// Containerd is a running private containerd.
type Containerd struct {
	// Dir holds the configuration, root, state, socket and log.
	Dir string
	// Socket is the path of containerd's gRPC socket (for CRI and containerd's own client).
	Socket string
	// Runtime is a CRI client connected to Socket.
	Runtime internalapi.RuntimeService

	cmd      *exec.Cmd
	done     chan struct{}
	log      *os.File
	stopOnce sync.Once
	stopErr  error
}

// Start runs containerd in dir (which must exist and be short enough for unix sockets), waits
// until its CRI answers, and imports the sandbox image.
func Start(ctx context.Context, dir string) (*Containerd, error) {
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("finding %s (run make deps): %w", bin, err)
		}
	}
	c := &Containerd{Dir: dir, Socket: filepath.Join(dir, "containerd.sock"), done: make(chan struct{})}
	if err := c.start(); err != nil {
		return nil, err
	}
	if err := c.connect(ctx); err != nil {
		_ = c.Stop()
		return nil, err
	}
	err := c.ImportImage(ctx, Sandbox)
	if err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// StartT starts containerd in a fresh temporary directory and stops it when the test ends.
func StartT(t testing.TB) *Containerd {
	t.Helper()
	// Unix socket paths are limited to 108 bytes: t.TempDir can be too long.
	dir, err := os.MkdirTemp("", "palisade-ctd-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("starting containerd: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping containerd: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	return c
}

func (c *Containerd) config() string { return Config(c.Dir, c.Socket, "") }

// Config is the configuration of a private containerd keeping everything under dir (root,
// state, runc's root) and serving on socket, with the CRI settings this kernel needs. With
// cniConfDir set, the CRI sets pods up with the CNI configuration there and Debian's plugins in
// /usr/lib/cni (what a kubelet needs); without, pods share the host network.
func Config(dir, socket, cniConfDir string) string {
	cni := ""
	if cniConfDir != "" {
		// Pod network namespaces are mounted under the state directory, not /var/run/netns:
		// a containerd killed with its machine leaves none behind.
		cni = fmt.Sprintf(`  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, cniConfDir)
	}
	return fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  disable_apparmor = true
%s  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    Root = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), socket, socket+".ttrpc",
		filepath.Join(dir, "opt"), SandboxImage, cni, filepath.Join(dir, "runc"))
}

func (c *Containerd) start() error {
	cfg := filepath.Join(c.Dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(c.config()), 0o600); err != nil {
		return fmt.Errorf("writing containerd config: %w", err)
	}
	log, err := os.Create(filepath.Join(c.Dir, "containerd.log"))
	if err != nil {
		return fmt.Errorf("starting containerd: %w", err)
	}
	c.log = log
	c.cmd = exec.Command("containerd", "--config", cfg)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting containerd: %w", err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.done)
	}()
	return nil
}

// connect waits for the socket and the CRI's Version answer.
func (c *Containerd) connect(ctx context.Context) error {
	for {
		if _, err := os.Stat(c.Socket); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for containerd's socket: %w\n%s", ctx.Err(), c.LogTail(20))
		case <-c.done:
			return fmt.Errorf("containerd exited at start\n%s", c.LogTail(20))
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The socket is bound a moment before containerd listens on it (a loaded machine shows it):
	// a refused connection is retried until ctx ends.
	var rt internalapi.RuntimeService
	for {
		var err error
		rt, err = cri.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + c.Socket).
			WithConnectionTimeout(10 * time.Second).WithTracerProvider(nil).Build(ctx)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connecting to containerd's CRI: %w", err)
		case <-c.done:
			return fmt.Errorf("containerd exited at start\n%s", c.LogTail(20))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := rt.Version(ctx, "v1"); err != nil {
		return fmt.Errorf("asking containerd's CRI for its version: %w", err)
	}
	c.Runtime = rt
	return nil
}

// Ctr runs ctr against this containerd in the CRI's namespace.
func (c *Containerd) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	args = append([]string{"--address", c.Socket, "--namespace", Namespace}, args...)
	out, err := exec.CommandContext(ctx, "ctr", args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("running ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// ImportImage builds img and imports it, unpacked for the native snapshotter.
func (c *Containerd) ImportImage(ctx context.Context, img Image) error {
	f, err := os.CreateTemp(c.Dir, "image-*.tar")
	if err != nil {
		return fmt.Errorf("importing image %s: %w", img.Name, err)
	}
	f.Close()
	defer os.Remove(f.Name())
	if err := BuildImage(f.Name(), img); err != nil {
		return err
	}
	if _, err := c.Ctr(ctx, "images", "import", "--snapshotter", "native", f.Name()); err != nil {
		return fmt.Errorf("importing image %s: %w", img.Name, err)
	}
	return nil
}

// LogTail returns containerd's last n log lines.
func (c *Containerd) LogTail(n int) string {
	data, _ := os.ReadFile(filepath.Join(c.Dir, "containerd.log"))
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Stop removes every pod sandbox (and so its containers), stops containerd, kills the shims it
// started, and unmounts whatever is still mounted under Dir. Calling it again does nothing.
func (c *Containerd) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Containerd) stop() error {
	var errs []error
	if c.Runtime != nil {
		errs = append(errs, c.removeAllPods())
	}
	if c.cmd != nil && c.cmd.Process != nil {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
		c.log.Close()
	}
	errs = append(errs, killProcessesUsing(c.Dir), unmountUnder(c.Dir))
	return errors.Join(errs...)
}

func (c *Containerd) removeAllPods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := c.Runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, p := range pods {
		if err := c.Runtime.StopPodSandbox(ctx, p.Id); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandbox %s: %w", p.Id, err))
		}
		if err := c.Runtime.RemovePodSandbox(ctx, p.Id); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox %s: %w", p.Id, err))
		}
	}
	return errors.Join(errs...)
}

// killProcessesUsing SIGKILLs the processes (containerd's shims) whose command line names dir.
func killProcessesUsing(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := processesUsing(dir)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still use %s", pids, dir)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func processesUsing(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// unmountUnder detaches every mount point below dir, deepest first.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading mountinfo: %w", err)
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	var errs []error
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", points[i], err))
		}
	}
	return errors.Join(errs...)
}
