package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/pki"
)

// agentBin is the palisade-agent binary built for the tests.
var agentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "palisade-agent-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = filepath.Join(dir, "palisade-agent")
	// The agent finds palisade-executor next to itself.
	for bin, pkg := range map[string]string{agentBin: ".", filepath.Join(dir, "palisade-executor"): "../palisade-executor"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", filepath.Base(bin), err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const testNode = "node-1"

// env is a controller-side heartbeat Server on loopback with the files an agent needs.
type env struct {
	dir, caFile, certFile, keyFile string
	ca                             *pki.CA
	server                         *channel.Server
	beats                          chan agentwire.Heartbeat
	// bin is the agent binary startAgent runs: agentBin unless a test changes it.
	bin string
}

// newEnv makes the certificates and, unless addr is empty, starts the Server on addr.
func newEnv(t testing.TB, addr string) *env {
	t.Helper()
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &env{ca: ca, dir: dir, caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "agent.crt"), keyFile: filepath.Join(dir, "agent.key"), beats: make(chan agentwire.Heartbeat, 1000), bin: agentBin}
	if err := os.WriteFile(e.caFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(pair *pki.KeyPair, err error, cert, key string) {
		if err == nil {
			err = pair.WriteFiles(filepath.Join(dir, cert), filepath.Join(dir, key))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	pair, err := ca.IssueServer([]string{"127.0.0.1"})
	write(pair, err, "server.crt", "server.key")
	pair, err = ca.IssueAgent(testNode)
	write(pair, err, "agent.crt", "agent.key")
	if addr != "" {
		e.startServer(t, addr)
	}
	return e
}

// startServer starts a heartbeat Server for e on addr and returns its address and a function
// that stops it (idempotent; also run at cleanup).
func (e *env) startServer(t testing.TB, addr string, edit ...func(*channel.ServerOptions)) (string, func()) {
	t.Helper()
	opts := channel.ServerOptions{
		Addr: addr, CertFile: filepath.Join(e.dir, "server.crt"), KeyFile: filepath.Join(e.dir, "server.key"), CAFile: e.caFile,
		OnHeartbeat: func(hb agentwire.Heartbeat) {
			select {
			case e.beats <- hb:
			default:
			}
		},
	}
	for _, f := range edit {
		f(&opts)
	}
	s, err := channel.NewServer(opts)
	if err == nil {
		err = s.Listen()
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	e.server = s
	return s.Addr(), stop
}

// next waits for the next heartbeat.
func (e *env) next(t testing.TB, within time.Duration) agentwire.Heartbeat {
	t.Helper()
	select {
	case hb := <-e.beats:
		return hb
	case <-time.After(within):
		t.Fatalf("no heartbeat within %s", within)
		return agentwire.Heartbeat{}
	}
}

// proc is a running palisade-agent.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func (e *env) startAgent(t testing.TB, controller, healthz string, interval time.Duration, extra ...string) *proc {
	t.Helper()
	args := append([]string{
		"--controller-address", controller, "--node-name", testNode, "--cert", e.certFile, "--key", e.keyFile,
		"--ca", e.caFile, "--interval", interval.String(), "--kubelet-healthz", healthz,
		"--probe-address", "127.0.0.1:0", "--kubelet-port", "0", // extra may override these
		"--state-dir", t.TempDir(),
	}, extra...)
	return startProc(t, exec.Command(e.bin, args...), "agent")
}

// startProc starts cmd with its stderr kept, kills it when the test ends and then shows its
// logs (as what's) if the test failed.
func startProc(t testing.TB, cmd *exec.Cmd, what string) *proc {
	t.Helper()
	p := &proc{cmd: cmd, done: make(chan struct{})}
	p.cmd.Stderr = p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s logs:\n%s", what, p.logs())
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit code.
func (p *proc) stop(t testing.TB) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(5 * time.Second):
		t.Fatal("agent still running 5s after SIGTERM")
		return -1
	}
}

// waitForLog waits for a log line containing s.
func (p *proc) waitForLog(t testing.TB, s string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(p.logs(), s) {
			return
		}
	}
	t.Fatalf("no log line with %q within %s", s, within)
}
