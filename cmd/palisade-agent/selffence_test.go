package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/test/testbed/containerd"
)

func newAPIHealthz() *httptest.Server {
	return httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
}

// TestSelfFence: the real binary on a real containerd, with --self-fence-after 2s. While the
// controller and the API server (a self-signed TLS healthz: not verified) are reachable, nothing
// happens. Once both are gone, the agent stops the kubelet, terminates the workload (read back
// through the CRI), and arms the watchdog; when the controller listens again on the same
// address, the heartbeats report the self-fence Confirmed.
func TestSelfFence(t *testing.T) {
	t.Parallel()
	ctd := startContainerd(t)
	ctd.RunEventsPod(t, "work", "uid-work", eventsImage, map[string]string{"app": "TERM", "sidecar": "TERM"})
	e := newEnv(t, "")
	addr, stopServer := e.startServer(t, "127.0.0.1:0")
	api := newAPIHealthz()
	defer api.Close()
	k := newKubelet()
	defer k.srv.Close()
	dir := t.TempDir()
	wd, stopped := filepath.Join(dir, "watchdog"), filepath.Join(dir, "kubelet-stopped")
	if err := os.WriteFile(wd, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := e.startAgent(t, addr, k.srv.URL, interval, "--cri-endpoint", ctd.Socket, "--kubelet-stop-command", "touch "+stopped,
		"--self-fence-after", "2s", "--api-server-healthz", api.URL, "--watchdog-device", wd)
	e.next(t, 5*time.Second)
	p.waitForLog(t, `"API server reachable"`, 5*time.Second)

	time.Sleep(3 * time.Second)
	checkNotFenced(t, ctd, p, wd, "uid-work", "app", "sidecar")

	cut := time.Now()
	api.Close()
	stopServer()
	t.Logf("MEASURED stopping the API healthz and the heartbeat server: %.3fs", time.Since(cut).Seconds())
	var took time.Duration
	for deadline := cut.Add(12 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st := containerStates(t, ctd, "uid-work")
		if st["app"] == runtimeapi.ContainerState_CONTAINER_EXITED && st["sidecar"] == runtimeapi.ContainerState_CONTAINER_EXITED {
			took = time.Since(cut)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workload still %v 12 s after the node was isolated", st)
		}
	}
	t.Logf("MEASURED isolation to workload exited: %.3fs (threshold 2 s)", took.Seconds())
	// The last heartbeat the controller accepted may have been an interval before the cut.
	if took < 2*time.Second-interval {
		t.Errorf("self-fenced %s after isolation, before the 2 s threshold", took)
	}
	if took > 6*time.Second {
		t.Errorf("self-fenced %s after isolation, want ~2 s + an interval or two + the containers' exit", took)
	}
	if _, err := os.Stat(stopped); err != nil {
		t.Errorf("the kubelet stop command did not run: %v", err)
	}
	p.waitForLog(t, "watchdog armed", 5*time.Second)
	if b, _ := os.ReadFile(wd); string(b) != "1" {
		t.Errorf("watchdog device holds %q, want \"1\" (written once)", b)
	}

	// The controller is back on the same address: the next heartbeats report the self-fence.
	for len(e.beats) > 0 {
		<-e.beats
	}
	e.startServer(t, addr)
	var final *agentwire.ExecutorStatus
	for deadline := time.Now().Add(10 * time.Second); final == nil && time.Now().Before(deadline); {
		if st := e.next(t, 10*time.Second).Executor; st != nil && strings.HasPrefix(st.ID, "self-fence-") && st.State != agentwire.ExecutorRunning {
			final = st
		}
	}
	if final == nil || final.State != agentwire.ExecutorConfirmed || final.Pods != 1 || final.Containers != 2 {
		t.Fatalf("executor status after reconnecting %+v, want a self-fence-… Confirmed for 1 pod, 2 containers", final)
	}
	if got, ok := e.server.ExecutorStatus(testNode); !ok || got.ID != final.ID {
		t.Errorf("server's executor status %+v, %v", got, ok)
	}
	p.waitForLog(t, "reachable again after self-fencing", 5*time.Second)
	if n := strings.Count(p.logs(), `"SELF-FENCING: neither`); n != 1 {
		t.Errorf("%d self-fence log lines, want 1", n)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	checkJSONLogs(t, p.logs(), "API server unreachable", "cannot reach the controller", "kubelet stopped", "terminating pods", "command confirmed",
		"reachable again after self-fencing: self-fencing re-armed")
}

// TestNoSelfFenceWhileReachable: an agent that cannot reach the controller but reaches the API
// server, and one that reaches the controller but not the API server (no URL), do not fence
// themselves within 3× the threshold.
func TestNoSelfFenceWhileReachable(t *testing.T) {
	t.Parallel()
	ctd := startContainerd(t)
	ctd.RunEventsPod(t, "work", "uid-work", eventsImage, map[string]string{"app": "TERM"})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := lis.Addr().String()
	lis.Close()
	e := newEnv(t, "127.0.0.1:0")
	api := newAPIHealthz()
	defer api.Close()
	k := newKubelet()
	defer k.srv.Close()
	dir := t.TempDir()
	wd := filepath.Join(dir, "watchdog")
	if err := os.WriteFile(wd, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--cri-endpoint", ctd.Socket, "--self-fence-after", "1s", "--watchdog-device", wd}
	started := time.Now()
	cut := e.startAgent(t, nowhere, k.srv.URL, interval, append([]string{"--api-server-healthz", api.URL}, common...)...)
	noAPI := e.startAgent(t, e.server.Addr(), k.srv.URL, interval, common...)
	cut.waitForLog(t, "cannot reach the controller", 5*time.Second)
	cut.waitForLog(t, `"API server reachable"`, 5*time.Second)
	e.next(t, 5*time.Second)
	time.Sleep(time.Until(started.Add(3*time.Second + 500*time.Millisecond))) // 3× the threshold, and more
	for _, p := range []*proc{cut, noAPI} {
		checkNotFenced(t, ctd, p, wd, "uid-work", "app")
	}
}

// checkNotFenced: the agent has not self-fenced: the pod's containers run, no self-fence was
// logged, and the watchdog device was not written.
func checkNotFenced(t *testing.T, ctd *containerd.Containerd, p *proc, wd, uid string, containers ...string) {
	t.Helper()
	states := containerStates(t, ctd, uid)
	for _, c := range containers {
		if states[c] != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s of pod %s: %v, want running (no self-fence)", c, uid, states[c])
		}
	}
	if strings.Contains(p.logs(), "SELF-FENCING") {
		t.Errorf("the agent self-fenced")
	}
	if b, err := os.ReadFile(wd); err != nil || len(b) != 0 {
		t.Errorf("watchdog device holds %q (%v), want untouched", b, err)
	}
}

// TestSelfFenceAfterRestart: the real binary, with --self-fence-after 6s and a state directory,
// is killed (SIGKILL, as an OOM kill) 3 s into its node's isolation and started again: it fences
// the node 6 s after the last reach it recorded, as its heartbeats promised the controller, not
// 6 s after its restart.
func TestSelfFenceAfterRestart(t *testing.T) {
	t.Parallel()
	ctd := startContainerd(t)
	ctd.RunEventsPod(t, "work", "uid-work", eventsImage, map[string]string{"app": "TERM"})
	e := newEnv(t, "")
	addr, stopServer := e.startServer(t, "127.0.0.1:0")
	api := newAPIHealthz()
	defer api.Close()
	k := newKubelet()
	defer k.srv.Close()
	dir := t.TempDir()
	wd, stopped, state := filepath.Join(dir, "watchdog"), filepath.Join(dir, "kubelet-stopped"), filepath.Join(dir, "state")
	if err := os.WriteFile(wd, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--cri-endpoint", ctd.Socket, "--kubelet-stop-command", "touch " + stopped,
		"--self-fence-after", "6s", "--api-server-healthz", api.URL, "--watchdog-device", wd, "--state-dir", state}
	first := e.startAgent(t, addr, k.srv.URL, interval, args...)
	e.next(t, 5*time.Second)
	first.waitForLog(t, `"API server reachable"`, 5*time.Second)
	// The reach is recorded at the first heartbeat, then every 5 s: cut just after the second
	// record, so that it is the last reach within about an interval.
	time.Sleep(5*time.Second + 3*interval)
	if _, err := os.Stat(filepath.Join(state, "last-reached")); err != nil {
		t.Fatalf("no last reach recorded: %v", err)
	}

	cut := time.Now()
	api.Close()
	stopServer()
	time.Sleep(time.Until(cut.Add(3 * time.Second)))
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.done
	second := e.startAgent(t, addr, k.srv.URL, interval, args...)
	var took time.Duration
	for deadline := cut.Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st := containerStates(t, ctd, "uid-work"); st["app"] == runtimeapi.ContainerState_CONTAINER_EXITED {
			took = time.Since(cut)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("workload still running 15 s after the node was isolated")
		}
	}
	t.Logf("MEASURED isolation to workload exited, the agent restarted 3 s in: %.3fs (threshold 6 s)", took.Seconds())
	if took < 5*time.Second {
		t.Errorf("self-fenced %s after isolation, well before the 6 s threshold", took)
	}
	// Counted from the restart it would be 9 s and more.
	if took > 8500*time.Millisecond {
		t.Errorf("self-fenced %s after isolation, want ~6 s after the last reach (not 6 s after the restart 3 s in)", took)
	}
	if strings.Contains(first.logs(), "SELF-FENCING") {
		t.Errorf("the first agent self-fenced before it was killed")
	}
	second.waitForLog(t, "restarted: counting isolation from the last reach recorded", 5*time.Second)
}

// TestPettedWatchdogOnTheBinary: with --watchdog-timeout the real binary opens the watchdog at
// its start and pets it at every heartbeat while reached (a file stands in for the device: it has
// no watchdog ioctls, so the agent counts the flag's timeout, and says so); its heartbeats then
// promise --self-fence-after plus that timeout; SIGTERM disarms it with the magic close, SIGKILL
// leaves it armed. Bad combinations of the flags are refused.
func TestPettedWatchdogOnTheBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	addr, stopServer := e.startServer(t, "127.0.0.1:0")
	api := newAPIHealthz()
	defer api.Close()
	k := newKubelet()
	defer k.srv.Close()
	dir := t.TempDir()
	for _, end := range []string{"SIGTERM", "SIGKILL"} {
		wd := filepath.Join(dir, "watchdog-"+end)
		if err := os.WriteFile(wd, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		p := e.startAgent(t, addr, k.srv.URL, interval, "--self-fence-after", "4s", "--api-server-healthz", api.URL,
			"--watchdog-device", wd, "--watchdog-timeout", "3s", "--watchdog-stand-in")
		p.waitForLog(t, "watchdog armed and petted", 5*time.Second)
		for len(e.beats) > 0 {
			<-e.beats
		}
		if hb := e.next(t, 5*time.Second); hb.SelfFenceWithin != 10*time.Second {
			t.Errorf("heartbeat promises a self-fence within %s, want 10s (4s + twice the watchdog's 3s)", hb.SelfFenceWithin)
		}
		time.Sleep(2 * time.Second)
		b, _ := os.ReadFile(wd)
		if n := strings.Count(string(b), "1"); n < 3 {
			t.Errorf("%d pets in the first 2 s, want one at the start and one every 750 ms (a quarter of the timeout) (%q)", n, b)
		}
		if end == "SIGTERM" {
			if code := p.stop(t); code != 0 {
				t.Errorf("exit status %d after SIGTERM", code)
			}
			if b, _ := os.ReadFile(wd); !strings.HasSuffix(string(b), "V") {
				t.Errorf("after SIGTERM while reached the device holds %q, want the magic close 'V' last", b)
			}
			if hb, ok := e.server.Snapshot()[testNode]; !ok || hb.SelfFenceWithin != 0 {
				t.Errorf("the controller's latest heartbeat of the stopped agent promises a self-fence within %s, want none (the farewell withdraws it)", hb.SelfFenceWithin)
			}
			continue
		}
		_ = p.cmd.Process.Kill()
		<-p.done
		if b, _ := os.ReadFile(wd); strings.Contains(string(b), "V") {
			t.Errorf("after SIGKILL the device holds %q: no magic close, the watchdog stays armed", b)
		}
	}

	// A plain file is no watchdog: without --watchdog-stand-in the agent refuses to start.
	plain := filepath.Join(dir, "not-a-watchdog")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := e.startAgent(t, addr, k.srv.URL, interval, "--self-fence-after", "4s", "--watchdog-device", plain, "--watchdog-timeout", "3s")
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(p.logs(), "is not a watchdog device") {
			t.Errorf("with a plain file as its watchdog the agent exited %d, logs %s; want a refusal", code, p.logs())
		}
	case <-time.After(10 * time.Second):
		t.Error("the agent runs with a plain file as its watchdog device")
	}

	// Self-fencing on without a petted watchdog: no promise.
	p = e.startAgent(t, addr, k.srv.URL, interval, "--self-fence-after", "4s", "--api-server-healthz", api.URL)
	for len(e.beats) > 0 {
		<-e.beats
	}
	if hb := e.next(t, 5*time.Second); hb.Node != testNode || hb.SelfFenceWithin != 0 {
		t.Errorf("an agent without a petted watchdog promises a self-fence within %s, want none", hb.SelfFenceWithin)
	}
	p.stop(t)

	// SIGTERM while the controller does not hear it (the API server still answers, so the node
	// is reached): the farewell is not taken, the promise stands, and the watchdog stays armed.
	wd := filepath.Join(dir, "watchdog-unheard")
	if err := os.WriteFile(wd, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p = e.startAgent(t, addr, k.srv.URL, interval, "--self-fence-after", "4s", "--api-server-healthz", api.URL,
		"--watchdog-device", wd, "--watchdog-timeout", "3s", "--watchdog-stand-in")
	p.waitForLog(t, "watchdog armed and petted", 5*time.Second)
	e.next(t, 5*time.Second)
	stopServer()
	time.Sleep(3 * interval)
	if code := p.stop(t); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	if b, _ := os.ReadFile(wd); strings.Contains(string(b), "V") {
		t.Errorf("after SIGTERM unheard by the controller the device holds %q: its promise stands, so the watchdog must stay armed", b)
	}

	base := []string{"--controller-address", "x:1", "--node-name", "n", "--cert", "c", "--key", "k", "--ca", "a"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--watchdog-timeout", "10s", "--self-fence-after", "1m"}, "--watchdog-timeout needs --watchdog-device and --self-fence-after"},
		{[]string{"--watchdog-timeout", "10s", "--watchdog-device", "/dev/watchdog"}, "--watchdog-timeout needs --watchdog-device and --self-fence-after"},
		{[]string{"--watchdog-timeout", "500ms", "--watchdog-device", "/dev/watchdog", "--self-fence-after", "1m"}, "at least 1s"},
		{[]string{"--watchdog-timeout", "-1s"}, "must not be negative"},
		{[]string{"--watchdog-timeout", "1h", "--watchdog-device", "/dev/watchdog", "--self-fence-after", "23h"}, "is 25h0m0s: the heartbeats promise a self-fence within at most 24h0m0s"},
	} {
		if _, err := parseFlags(append(base, tc.args...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%v) = %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseFlags(append(base, "--watchdog-timeout", "10s", "--watchdog-device", "/dev/watchdog", "--self-fence-after", "1m")); err != nil {
		t.Errorf("a valid petted watchdog refused: %v", err)
	}
}
