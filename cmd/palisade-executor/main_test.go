package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/providers/executor/node"
	"palisade.dev/palisade/providers/executor/protocol"
	"palisade.dev/palisade/test/testbed/containerd"
)

// executorBin is the palisade-executor binary built for the tests.
var executorBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "palisade-executor-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	executorBin = filepath.Join(dir, "palisade-executor")
	if out, err := exec.Command("go", "build", "-o", executorBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building palisade-executor: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// eventsImage runs containerd.EventCommand.
const eventsImage = "palisade.test/events:plain"

// child is a running palisade-executor, spoken to as the agent does.
type child struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	answers chan protocol.Response
	lines   chan string // stdout lines that are not responses
	done    chan struct{}
	mu      sync.Mutex
	stderr  bytes.Buffer
}

func (c *child) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.Write(b)
}

func (c *child) logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

func startExecutor(t *testing.T, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(executorBin, args...), answers: make(chan protocol.Response, 100), lines: make(chan string, 100), done: make(chan struct{})}
	c.cmd.Stderr = c
	in, err := c.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.in = in
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var resp protocol.Response
			if err := json.Unmarshal(sc.Bytes(), &resp); err != nil || resp.ID == 0 {
				c.lines <- sc.Text()
				continue
			}
			c.answers <- resp
		}
		_ = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
		if t.Failed() {
			t.Logf("executor logs:\n%s", c.logs())
		}
	})
	return c
}

func (c *child) send(t *testing.T, req protocol.Request) {
	t.Helper()
	line, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.in.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
}

func (c *child) next(t *testing.T, within time.Duration) protocol.Response {
	t.Helper()
	select {
	case resp := <-c.answers:
		return resp
	case line := <-c.lines:
		t.Fatalf("not a response on stdout: %q", line)
	case <-c.done:
		t.Fatalf("executor exited (%v) instead of answering", c.cmd.ProcessState)
	case <-time.After(within):
		t.Fatalf("no answer within %s", within)
	}
	return protocol.Response{}
}

// exit closes stdin (unless closeStdin is false) and returns the exit code, failing the test
// if the executor is still running after within.
func (c *child) exit(t *testing.T, closeStdin bool, within time.Duration) int {
	t.Helper()
	if closeStdin {
		_ = c.in.Close()
	}
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("executor still running %s later", within)
		return -1
	}
}

func startContainerd(t *testing.T) *containerd.Containerd {
	t.Helper()
	ctd := containerd.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ctd.ImportImage(ctx, containerd.Image{Name: eventsImage, Cmd: containerd.EventCommand}); err != nil {
		t.Fatal(err)
	}
	return ctd
}

func containerState(t *testing.T, ctd *containerd.Containerd, uid, name string) runtimeapi.ContainerState {
	t.Helper()
	list, err := ctd.Runtime.ListContainers(context.Background(), &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if c.Labels["io.kubernetes.container.name"] == name {
			return c.State
		}
	}
	t.Fatalf("no container %s in pod %s", name, uid)
	return 0
}

// TestProtocol speaks to the real binary on a real containerd as the agent does: connect; a
// read-back counting the workload's running containers (not the agent's own pod's); a terminate
// with a 2 s cap, during which a read-back is answered first; a read-back of 0 after it; an
// unknown operation; and stdin closing ends it with status 0. Its logs are JSON on stderr.
func TestProtocol(t *testing.T) {
	t.Parallel()
	ctd := startContainerd(t)
	ctd.RunEventsPod(t, "work", "uid-work", eventsImage, map[string]string{"graceful": "TERM", "stubborn": ""})
	ctd.RunEventsPod(t, "agent-self", "uid-agent", eventsImage, map[string]string{"agent": ""})
	c := startExecutor(t, "--cri-endpoint", "unix://"+ctd.Socket, "--pod-uid", "uid-agent")
	deadline := time.Now().Add(time.Minute)

	c.send(t, protocol.Request{ID: 1, Op: protocol.OpConnect, Deadline: deadline})
	if resp := c.next(t, 15*time.Second); resp.ID != 1 || resp.Version != protocol.Version || resp.Error != "" {
		t.Fatalf("connect: %+v, want version %d", resp, protocol.Version)
	}
	c.send(t, protocol.Request{ID: 2, Op: protocol.OpReadBack, Deadline: deadline})
	if resp := c.next(t, 5*time.Second); resp.ID != 2 || resp.Running == nil || *resp.Running != 2 {
		t.Errorf("read-back: %+v, want 2 running (the agent's own pod left out)", resp)
	}

	start := time.Now()
	c.send(t, protocol.Request{ID: 3, Op: protocol.OpTerminate, Deadline: deadline, Command: "fence-1", GracePeriodSeconds: ptr.To[int64](2)})
	// graceful exits on its TERM; stubborn waits out its grace period of 2 s: read back between.
	// Past 1.5 s, stubborn's kill (at 2 s) comes too near for the read-back to fall between.
	for containerState(t, ctd, "uid-work", "graceful") != runtimeapi.ContainerState_CONTAINER_EXITED {
		if time.Since(start) > 1500*time.Millisecond {
			t.Fatalf("container graceful not exited %s after the terminate, which sent it TERM", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.send(t, protocol.Request{ID: 4, Op: protocol.OpReadBack, Deadline: deadline})
	if resp := c.next(t, 5*time.Second); resp.ID != 4 || resp.Running == nil || *resp.Running != 1 {
		t.Errorf("read-back during the terminate: %+v, want the answer to 4 first, 1 running", resp)
	}
	resp := c.next(t, 15*time.Second)
	took := time.Since(start)
	t.Logf("MEASURED terminate answered after %.3fs", took.Seconds())
	if resp.ID != 3 || resp.Error != "" || resp.Pods != 1 || resp.Containers != 2 {
		t.Errorf("terminate: %+v, want 1 pod, 2 containers, no error", resp)
	}
	if took < 2*time.Second || took > 5*time.Second {
		t.Errorf("terminate answered after %s, want ~2 s (the capped grace period)", took)
	}
	for _, name := range []string{"graceful", "stubborn"} {
		if st := containerState(t, ctd, "uid-work", name); st != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %s: %v, want exited", name, st)
		}
	}
	if st := containerState(t, ctd, "uid-agent", "agent"); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the agent's own container: %v, want running", st)
	}

	c.send(t, protocol.Request{ID: 5, Op: protocol.OpReadBack, Deadline: deadline})
	if resp := c.next(t, 5*time.Second); resp.ID != 5 || resp.Running == nil || *resp.Running != 0 {
		t.Errorf("read-back after the terminate: %+v, want 0 running", resp)
	}
	c.send(t, protocol.Request{ID: 6, Op: "reboot"})
	if resp := c.next(t, 5*time.Second); resp.ID != 6 || !strings.Contains(resp.Error, `unknown operation "reboot"`) {
		t.Errorf("unknown operation: %+v", resp)
	}
	if code := c.exit(t, true, 5*time.Second); code != 0 {
		t.Errorf("exit status %d after stdin closed, want 0", code)
	}
	checkJSONLogs(t, c.logs(), "terminating pods", "pod terminated")
}

// TestProtocolStops: a terminate whose deadline comes before a pod's grace period is over cuts
// the grace period so that SIGKILL and its read-back fit before the deadline: the container that
// ignores SIGTERM is killed and read back exited within it, and the terminate succeeds (before,
// it was answered at the deadline with an error and the container left running: on the
// self-fence path, a workload the controller would count as stopped after safeAfter). A
// terminate running when stdin closes is cancelled, its container killed rather than left
// half-way, and the executor exits with status 0.
func TestProtocolStops(t *testing.T) {
	t.Parallel()
	ctd := startContainerd(t)
	ctd.RunEventsPod(t, "work", "uid-work", eventsImage, map[string]string{"stubborn": ""})
	c := startExecutor(t, "--cri-endpoint", ctd.Socket)
	start := time.Now()
	deadline := start.Add(3 * time.Second)
	c.send(t, protocol.Request{ID: 1, Op: protocol.OpTerminate, Deadline: deadline, GracePeriodSeconds: ptr.To[int64](30)})
	resp := c.next(t, 15*time.Second)
	took := time.Since(start)
	t.Logf("MEASURED terminate under a 3 s deadline, grace 30 s, answered after %.3fs: %+v", took.Seconds(), resp)
	if resp.ID != 1 || resp.Error != "" || resp.Containers != 1 {
		t.Errorf("terminate under a deadline shorter than the grace period: %+v, want the container stopped, no error", resp)
	}
	if time.Now().After(deadline) {
		t.Errorf("answered after %s, want before the 3 s deadline", took)
	}
	if st := containerState(t, ctd, "uid-work", "stubborn"); st != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("container: %v, want exited (killed within the deadline)", st)
	}
	if !strings.Contains(c.logs(), `"graceCutByTimeLimit":true`) {
		t.Error("the log does not say the grace period was cut by the time limit")
	}

	ctd.RunEventsPod(t, "work2", "uid-work2", eventsImage, map[string]string{"stubborn": ""})
	c.send(t, protocol.Request{ID: 2, Op: protocol.OpTerminate, GracePeriodSeconds: ptr.To[int64](30)})
	time.Sleep(time.Second)
	if st := containerState(t, ctd, "uid-work2", "stubborn"); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container of work2: %v before stdin closed, want running (its grace period had not passed): the test did not test", st)
	}
	start = time.Now()
	if code := c.exit(t, true, node.StopWait+2*time.Second); code != 0 {
		t.Errorf("exit status %d after stdin closed, want 0", code)
	}
	t.Logf("MEASURED stdin closed during a terminate to exit: %.3fs", time.Since(start).Seconds())
	// SIGKILL was sent as the executor stopped; the runtime reads the exit back a moment later.
	var st runtimeapi.ContainerState
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if st = containerState(t, ctd, "uid-work2", "stubborn"); st == runtimeapi.ContainerState_CONTAINER_EXITED {
			break
		}
	}
	if st != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("container of work2 2 s after the cancelled terminate: %v, want exited (killed, never left half-way)", st)
	}
}

// TestNotARequest: a line on stdin that is not a request ends the executor with status 1 and
// says why; so does starting it without --cri-endpoint. Neither needs a runtime.
func TestNotARequest(t *testing.T) {
	t.Parallel()
	c := startExecutor(t, "--cri-endpoint", "/nonexistent/containerd.sock")
	if _, err := c.in.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if code := c.exit(t, false, 5*time.Second); code != 1 || !strings.Contains(c.logs(), `not a request: "hello"`) {
		t.Errorf("exit status %d, stderr %q; want 1 and a message", code, c.logs())
	}
	out, err := exec.Command(executorBin).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "--cri-endpoint is required") {
		t.Errorf("without flags: %v, %q", err, out)
	}
}

// TestConnectFails: without a runtime at --cri-endpoint, a request is answered with an error
// within its deadline, and the executor goes on answering.
func TestConnectFails(t *testing.T) {
	t.Parallel()
	c := startExecutor(t, "--cri-endpoint", "/nonexistent/containerd.sock")
	for id := uint64(1); id <= 2; id++ {
		start := time.Now()
		c.send(t, protocol.Request{ID: id, Op: protocol.OpConnect, Deadline: start.Add(2 * time.Second)})
		resp := c.next(t, 5*time.Second)
		t.Logf("MEASURED connect to nothing answered after %.3fs: %s", time.Since(start).Seconds(), resp.Error)
		if resp.ID != id || resp.Error == "" || resp.Version != 0 {
			t.Errorf("connect to nothing: %+v, want an error", resp)
		}
	}
	if code := c.exit(t, true, 5*time.Second); code != 0 {
		t.Errorf("exit status %d after stdin closed, want 0", code)
	}
}

func checkJSONLogs(t *testing.T, logs string, messages ...string) {
	t.Helper()
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var entry struct {
			Msg    string `json:"msg"`
			Logger string `json:"logger"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil || !strings.HasPrefix(entry.Logger, "executor") {
			t.Errorf("log line is not JSON of the executor's logger: %q", line)
		}
		seen[entry.Msg] = true
	}
	for _, m := range messages {
		if !seen[m] {
			t.Errorf("no log line %q", m)
		}
	}
}
