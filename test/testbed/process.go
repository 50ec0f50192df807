package testbed

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// component is a control-plane program run as a child process in its own process group.
// A supervised one is started again when it exits, as the kubelet restarts a static pod: the
// scheduler exits on purpose when it finds its cache corrupted (after the API server's restart,
// for one) and counts on being restarted.
type component struct {
	name, path string
	args       []string
	log        *os.File
	supervise  bool

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed once the current process has been reaped
	err      error         // its exit status, valid after done
	stopping bool
	restarts int
	lastExit error
}

// restartDelay is how long a supervised component stays down before it is started again.
const restartDelay = time.Second

// startComponent runs path with args, writing stdout and stderr to logPath.
func startComponent(name, path string, args []string, logPath string) (*component, error) {
	return launch(&component{name: name, path: path, args: args}, logPath)
}

// superviseComponent runs path with args like startComponent, and starts it again whenever it
// exits until it is stopped.
func superviseComponent(name, path string, args []string, logPath string) (*component, error) {
	return launch(&component{name: name, path: path, args: args, supervise: true}, logPath)
}

func launch(p *component, logPath string) (*component, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.log = log
	if err := p.run(); err != nil {
		log.Close()
		return nil, err
	}
	return p, nil
}

// run starts the process and, for a supervised component, the watch that restarts it. The
// start happens under the lock, after a look at stopping, so that stop never misses a process
// started again.
func (p *component) run() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return nil
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
		if !p.supervise {
			return
		}
		time.Sleep(restartDelay)
		p.mu.Lock()
		if p.stopping {
			p.mu.Unlock()
			return
		}
		p.restarts++
		p.lastExit = err
		fmt.Fprintf(p.log, "\n--- testbed: %s exited (%v); started again, as the kubelet restarts a static pod ---\n", p.name, err)
		p.mu.Unlock()
		if err := p.run(); err != nil {
			fmt.Fprintf(p.log, "--- testbed: %v ---\n", err)
		}
	}()
	return nil
}

// current is the running (or last) process and its done channel.
func (p *component) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// status says whether the process runs, or how it ended, and how often it was restarted.
func (p *component) status() string {
	if p == nil {
		return "not started"
	}
	_, done := p.current()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := "running"
	select {
	case <-done:
		s = fmt.Sprintf("exited (%v)", p.err)
	default:
	}
	if p.restarts > 0 {
		s += fmt.Sprintf(", restarted %d times (last exit: %v)", p.restarts, p.lastExit)
	}
	return s
}

// stop sends SIGTERM to the process group, SIGKILL after grace, and waits until it is reaped;
// a supervised component is not started again.
func (p *component) stop(grace time.Duration) error {
	defer p.log.Close()
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	cmd, done := p.current()
	select {
	case <-done:
		return nil
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("stopping %s: pid %d survived SIGKILL", p.name, cmd.Process.Pid)
	}
}

// waitHealthy polls url (https, any certificate) until it answers 200 with a body for which
// accept returns true, the process exits, or ctx ends.
func (p *component) waitHealthy(ctx context.Context, url string, accept func(body []byte) bool) error {
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // local test component
	}
	defer client.CloseIdleConnections()
	_, done := p.current()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if body, ok := get(ctx, client, url); ok && accept(body) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to be healthy: %w\n%s", p.name, ctx.Err(), TailFile(p.log.Name(), 20))
		case <-done:
			return fmt.Errorf("waiting for %s to be healthy: it exited (%v)\n%s", p.name, p.status(), TailFile(p.log.Name(), 20))
		case <-tick.C:
		}
	}
}

func get(ctx context.Context, client *http.Client, url string) ([]byte, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, err == nil && resp.StatusCode == http.StatusOK
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// TailFile returns the last n lines of the file at path under a header naming it, or why it
// could not be read: for failure messages.
func TailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", path, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last lines of %s ---\n%s", filepath.Base(path), bytes.Join(lines, []byte("\n")))
}

// ProcessesUsing returns the PIDs of this process's live children whose command line mentions
// dir (every process a Cluster starts names its Dir in its flags). Zombies are left out.
func ProcessesUsing(dir string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !isLiveChild(pid) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// isLiveChild reports whether pid is a child of this process that is neither a zombie nor dead.
func isLiveChild(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ppid ...": the fields after the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 2 || fields[0] == "Z" || fields[0] == "X" {
		return false
	}
	return fields[1] == strconv.Itoa(os.Getpid())
}

// killLeftovers SIGKILLs the processes still using dir and waits up to timeout for them to go.
func killLeftovers(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := ProcessesUsing(dir)
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stopping test bed: processes %v still running", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
