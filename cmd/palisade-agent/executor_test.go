package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"palisade.dev/palisade/providers/executor/child/childtest"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/executor/child"
	"palisade.dev/palisade/test/testbed/containerd"
)

// executorPIDs returns the PIDs of the executor processes the agent logged as started, in order.
func executorPIDs(t testing.TB, p *proc) []int {
	t.Helper()
	var pids []int
	for _, line := range strings.Split(p.logs(), "\n") {
		var entry struct {
			Msg string `json:"msg"`
			PID int    `json:"pid"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "executor process started" {
			pids = append(pids, entry.PID)
		}
	}
	return pids
}

// failedWith sends command id and checks that it ends Failed (maybe before a heartbeat saw it
// Running), never Confirmed, with a message holding every one of want, and that the heartbeats
// go on.
func failedWith(t *testing.T, e *env, id string, within time.Duration, want ...string) agentwire.ExecutorStatus {
	t.Helper()
	e.server.SetCommand(testNode, agentwire.Command{ID: id, Action: agentwire.ActionTerminate})
	states, final := waitForOutcome(t, e, id, within)
	if s := strings.Join(states, ","); (s != "Running,Failed" && s != "Failed") || !containsAll(final.Message, want) {
		t.Errorf("command %s: states %v, final %+v; want Failed with a message holding %q", id, states, final, want)
	}
	e.next(t, 3*interval)
	return final
}

// TestExecutorMissing: without a palisade-executor to start, a Terminate command fails at once
// with a message saying what to do, and the agent warned of it when it started: one not next
// to the agent nor in $PATH, and a --executor-binary that does not exist.
func TestExecutorMissing(t *testing.T) {
	alone := filepath.Join(t.TempDir(), "palisade-agent")
	if err := os.Link(agentBin, alone); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", "/usr/bin:/bin")
	k := newKubelet()
	defer k.srv.Close()
	for _, tc := range []struct {
		name, bin string
		flags     []string
		message   []string
	}{
		{"not next to the agent nor in PATH", alone, nil,
			[]string{"palisade-executor is neither next to the agent (" + filepath.Dir(alone) + ") nor in $PATH", "--executor-binary"}},
		{"--executor-binary missing", agentBin, []string{"--executor-binary", "/nonexistent/palisade-executor"},
			[]string{"finding the executor: stat /nonexistent/palisade-executor: no such file or directory: check --executor-binary"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "127.0.0.1:0")
			e.bin = tc.bin
			p := e.startAgent(t, e.server.Addr(), k.srv.URL, interval, append([]string{"--cri-endpoint", "/nonexistent/containerd.sock"}, tc.flags...)...)
			p.waitForLog(t, "WARNING: a Terminate command or a self-fence would fail", 5*time.Second)
			failedWith(t, e, "c1", 5*time.Second, tc.message...)
		})
	}
}

// TestExecutorKilledMidCommand: the executor killed while it waits out a pod's grace period
// fails the command (the container, which ignores TERM, still runs: nothing was confirmed); the
// next command starts a new executor, which terminates the pod and reads it back.
func TestExecutorKilledMidCommand(t *testing.T) {
	t.Parallel()
	ctd := startContainerd(t)
	work := ctd.RunEventsPod(t, "work", "uid-work", eventsImage, map[string]string{"stubborn": ""})
	e := newEnv(t, "127.0.0.1:0")
	k := newKubelet()
	defer k.srv.Close()
	p := e.startAgent(t, e.server.Addr(), k.srv.URL, interval, "--cri-endpoint", ctd.Socket)
	e.server.SetCommand(testNode, agentwire.Command{ID: "c1", Action: agentwire.ActionTerminate, GracePeriodSeconds: ptr.To[int64](30)})
	containerd.WaitForEvent(t, work, "stubborn", "TERM")
	pids := executorPIDs(t, p)
	if len(pids) != 1 {
		t.Fatalf("executor processes started: %v, want one", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	states, final := waitForOutcome(t, e, "c1", 5*time.Second)
	want := []string{"ended unexpectedly (signal: killed)", "nothing it did is confirmed", "a new one is started for the next command"}
	if strings.Join(states, ",") != "Running,Failed" || !containsAll(final.Message, want) {
		t.Errorf("states %v, final %+v; want Running then Failed with a message holding %q", states, final, want)
	}
	childtest.CheckGone(t, pids[0])
	if got := containerStates(t, ctd, "uid-work")["stubborn"]; got != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after the executor was killed: %v, want still running", got)
	}

	e.server.SetCommand(testNode, agentwire.Command{ID: "c2", Action: agentwire.ActionTerminate, GracePeriodSeconds: ptr.To[int64](0)})
	states, final = waitForOutcome(t, e, "c2", 15*time.Second)
	if strings.Join(states, ",") != "Running,Confirmed" || final.Pods != 1 || final.Containers != 1 {
		t.Errorf("second command: states %v, final %+v; want Running then Confirmed for 1 pod, 1 container", states, final)
	}
	if pids = executorPIDs(t, p); len(pids) != 2 || pids[1] == pids[0] {
		t.Errorf("executor processes started: %v, want a second one", pids)
	}
	if got := containerStates(t, ctd, "uid-work")["stubborn"]; got != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("container after the second command: %v, want exited", got)
	}
	if hb := e.next(t, 5*time.Second); hb.RunningContainers == nil || *hb.RunningContainers != 0 {
		t.Errorf("read-back after the second command: %v, want 0 containers running", hb.RunningContainers)
	}
}

// TestExecutorGarbage: an executor whose stdout holds anything but answers to the agent's
// requests (not JSON, instead of the first answer or during the command; an answer to a
// request never sent) fails the command, and the agent kills it; so does one that closes its
// stdout during the command and goes on running.
func TestExecutorGarbage(t *testing.T) {
	t.Parallel()
	k := newKubelet()
	defer k.srv.Close()
	const connected = `read -r line; echo '{"id":1,"version":2}'
while read -r line; do case "$line" in *'"op":"terminate"'*) break;; esac; done
`
	// drain reads requests until stdin closes, answering none.
	const drain = "while read -r line; do :; done\n"
	garbage := func(line string) []string {
		return []string{"wrote " + line + " to its stdout, which is not an answer of the protocol", "the agent stopped it",
			"check that --executor-binary is the palisade-executor of this agent's release", "nothing it did is confirmed"}
	}
	for _, tc := range []struct {
		name, script string
		message      []string
	}{
		{"instead of the first answer", "echo 'Segmentation fault'\n" + drain, garbage(`"Segmentation fault"`)},
		{"during the command", connected + "echo 'panic: runtime error'\n" + drain, garbage(`"panic: runtime error"`)},
		{"an answer to nothing asked", connected + `echo '{"id":9999,"running":0}'` + "\n" + drain, garbage(`"{\"id\":9999,\"running\":0}"`)},
		{"stdout closed", connected + "exec >/dev/null\n" + drain,
			[]string{"closed its stdout and did not exit within 2s, so the agent killed it: signal: killed", "nothing it did is confirmed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "127.0.0.1:0")
			p := e.startAgent(t, e.server.Addr(), k.srv.URL, interval, "--cri-endpoint", "/nonexistent/containerd.sock",
				"--executor-binary", childtest.FakeExecutor(t, tc.script))
			failedWith(t, e, "c1", 5*time.Second, tc.message...)
			for _, pid := range executorPIDs(t, p) {
				childtest.CheckGone(t, pid)
			}
		})
	}
}

// TestExecutorHung: an executor that connects, then never answers, holds no heartbeat (each
// read-back gives up within half of the heartbeat's timeout) and fails the command once
// --executor-timeout and the grace for its answer have passed; the agent kills it.
func TestExecutorHung(t *testing.T) {
	t.Parallel()
	k := newKubelet()
	defer k.srv.Close()
	e := newEnv(t, "127.0.0.1:0")
	hung := childtest.FakeExecutor(t, `read -r line; echo '{"id":1,"version":2}'; while read -r line; do :; done`)
	p := e.startAgent(t, e.server.Addr(), k.srv.URL, interval, "--cri-endpoint", "/nonexistent/containerd.sock",
		"--executor-binary", hung, "--executor-timeout", "3s") // long enough for a loaded machine to start the executor
	e.server.SetCommand(testNode, agentwire.Command{ID: "c1", Action: agentwire.ActionTerminate})
	p.waitForLog(t, "executor process started", 5*time.Second)
	start := time.Now()
	for _, hb := range beats(t, e, 15, true) { // 3 s: the command's time limit and more
		if hb.RunningContainers != nil {
			t.Errorf("heartbeat %d: read-back %d from an executor that never answers", hb.Seq, *hb.RunningContainers)
		}
	}
	_, final := waitForOutcome(t, e, "c1", 10*time.Second)
	t.Logf("MEASURED hung executor to Failed: %.3fs", time.Since(start).Seconds())
	want := []string{"executor timeout (3s) expired", "did not answer within 5s after it", "the agent stopped it as hung"}
	if final.State != agentwire.ExecutorFailed || !containsAll(final.Message, want) {
		t.Errorf("final status %+v, want Failed with a message holding %q", final, want)
	}
	beats(t, e, 3, true)
	pids := executorPIDs(t, p)
	if len(pids) == 0 {
		t.Fatal("no executor process logged")
	}
	childtest.CheckGone(t, pids[0])
	if !strings.Contains(p.logs(), "reading the runtime back") {
		t.Error("no log line about the read-back the executor did not answer")
	}
}

// TestExecutorEndsWithTheAgent: an executor that does not read its stdin (so only the kernel's
// parent-death signal can end it) is gone as soon as the agent is killed.
func TestExecutorEndsWithTheAgent(t *testing.T) {
	t.Parallel()
	k := newKubelet()
	defer k.srv.Close()
	e := newEnv(t, "127.0.0.1:0")
	deaf := childtest.FakeExecutor(t, `read -r line; echo '{"id":1,"version":2}'; exec sleep 600`)
	p := e.startAgent(t, e.server.Addr(), k.srv.URL, interval, "--cri-endpoint", "/nonexistent/containerd.sock",
		"--executor-binary", deaf, "--fault-report-confirmed-early")
	e.server.SetCommand(testNode, agentwire.Command{ID: "c1", Action: agentwire.ActionTerminate})
	if _, final := waitForOutcome(t, e, "c1", 5*time.Second); final.State != agentwire.ExecutorConfirmed {
		t.Fatalf("final status %+v, want Confirmed (fault injected)", final)
	}
	pids := executorPIDs(t, p)
	if len(pids) != 1 {
		t.Fatalf("executor processes started: %v, want one", pids)
	}
	if err := syscall.Kill(pids[0], 0); err != nil {
		t.Fatalf("executor process %d before the agent died: %v", pids[0], err)
	}
	// Should it outlive the agent, it would hold the agent's stderr, which the agent's own
	// clean-up waits for: killed first (clean-ups run last in, first out).
	t.Cleanup(func() { _ = syscall.Kill(pids[0], syscall.SIGKILL) })
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	childtest.CheckGone(t, pids[0])
}

// TestExecutorRestartedForReadBack: once an executor was connected, the heartbeats carry its
// read-back; when it dies with no command running, they carry none until the agent has started
// a new one in the background (at most every child.RestartEvery), and then carry its read-back again.
func TestExecutorRestartedForReadBack(t *testing.T) {
	t.Parallel()
	k := newKubelet()
	defer k.srv.Close()
	e := newEnv(t, "127.0.0.1:0")
	p := e.startAgent(t, e.server.Addr(), k.srv.URL, interval, "--cri-endpoint", "/nonexistent/containerd.sock",
		"--executor-binary", childtest.FakeExecutor(t, childtest.Answering), "--fault-report-confirmed-early")
	if hb := e.next(t, 5*time.Second); hb.RunningContainers != nil {
		t.Errorf("read-back %d before any command", *hb.RunningContainers)
	}
	e.server.SetCommand(testNode, agentwire.Command{ID: "c1", Action: agentwire.ActionTerminate})
	waitForOutcome(t, e, "c1", 5*time.Second)
	if hb := e.next(t, 5*time.Second); hb.RunningContainers == nil || *hb.RunningContainers != 0 {
		t.Fatalf("read-back %v once the executor is connected, want 0", hb.RunningContainers)
	}
	first := executorPIDs(t, p)[0]
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	sawNone := false
	for deadline := killed.Add(child.RestartEvery + 5*time.Second); ; {
		hb := e.next(t, 5*time.Second)
		if hb.RunningContainers == nil {
			sawNone = true
		} else if sawNone && *hb.RunningContainers == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no read-back from a new executor within %s of the first one's death", child.RestartEvery+5*time.Second)
		}
	}
	t.Logf("MEASURED read-back back %.3fs after the executor died", time.Since(killed).Seconds())
	if pids := executorPIDs(t, p); len(pids) != 2 || pids[1] == first {
		t.Errorf("executor processes started: %v, want a second one", pids)
	}
}
