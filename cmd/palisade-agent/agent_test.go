package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
)

const interval = 200 * time.Millisecond

// kubelet is a fake kubelet healthz endpoint: healthy, then hanging, then gone.
type kubelet struct {
	hang atomic.Bool
	srv  *httptest.Server
}

func newKubelet() *kubelet {
	k := &kubelet{}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k.hang.Load() {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	return k
}

// beats collects n heartbeats and checks that they were sent one interval apart (±25% on
// average, none later than 2.5 intervals) with consecutive sequence numbers and the kubelet as
// want. The first may take a while (a binary just started); the spacing is the agent's, read
// from the times it stamped on them (SentAt), which the test server's own delays do not move.
func beats(t *testing.T, e *env, n int, kubeletHealthy bool) []agentwire.Heartbeat {
	t.Helper()
	got := make([]agentwire.Heartbeat, n)
	sent := func(hb agentwire.Heartbeat) time.Time {
		if hb.SentAt.IsZero() {
			t.Errorf("heartbeat %d states no SentAt", hb.Seq)
			return hb.Received
		}
		return hb.SentAt
	}
	for i := range got {
		within := 3 * interval
		if i == 0 {
			within = 10 * time.Second
		}
		got[i] = e.next(t, within)
		if got[i].KubeletHealthy != kubeletHealthy {
			t.Errorf("heartbeat %d: kubeletHealthy %v, want %v", got[i].Seq, got[i].KubeletHealthy, kubeletHealthy)
		}
		if i > 0 && got[i].Seq != got[i-1].Seq+1 {
			t.Errorf("heartbeat seq %d after %d", got[i].Seq, got[i-1].Seq)
		}
		if i > 0 && sent(got[i]).Sub(sent(got[i-1])) > interval*5/2 {
			t.Errorf("heartbeat %d sent %s after the previous one", got[i].Seq, sent(got[i]).Sub(sent(got[i-1])))
		}
	}
	mean := sent(got[n-1]).Sub(sent(got[0])) / time.Duration(n-1)
	if mean < interval*3/4 || mean > interval*5/4 {
		t.Errorf("heartbeats %s apart on average, want %s ±25%%", mean, interval)
	}
	t.Logf("%d heartbeats %s apart on average", n, mean)
	return got
}

// TestAgentHeartbeats runs the binary against a heartbeat Server: heartbeats arrive every
// interval, report the kubelet healthy, then unhealthy while its healthz hangs (the check times
// out after half an interval, the beat is not late) and once it is stopped; SIGTERM ends the
// agent with status 0, and every log line is JSON.
func TestAgentHeartbeats(t *testing.T) {
	e := newEnv(t, "127.0.0.1:0")
	k := newKubelet()
	defer k.srv.Close()
	p := e.startAgent(t, e.server.Addr(), k.srv.URL+"/healthz", interval)

	first := beats(t, e, 6, true)[0]
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if first.Node != testNode || first.BootID != strings.TrimSpace(string(bootID)) || first.Interval != interval {
		t.Errorf("heartbeat %+v: want node %s, this boot ID, interval %s", first, testNode, interval)
	}

	k.hang.Store(true)
	drainUntil(t, e, false)
	beats(t, e, 4, false)
	k.srv.Close()
	k.hang.Store(false)
	drainUntil(t, e, false)
	beats(t, e, 4, false)

	if code := p.stop(t); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	checkJSONLogs(t, p.logs(), "starting palisade-agent", "heartbeats accepted by the controller", "kubelet healthy", "kubelet unhealthy", "stopping palisade-agent")
}

// drainUntil skips heartbeats until one reports the kubelet as want.
func drainUntil(t *testing.T, e *env, kubeletHealthy bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * interval); time.Now().Before(deadline); {
		if e.next(t, 3*interval).KubeletHealthy == kubeletHealthy {
			return
		}
	}
	t.Fatalf("no heartbeat with kubeletHealthy %v within %s", kubeletHealthy, 10*interval)
}

func checkJSONLogs(t *testing.T, logs string, messages ...string) {
	t.Helper()
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var entry struct {
			Msg string `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("log line is not JSON: %q", line)
		}
		seen[entry.Msg] = true
	}
	for _, m := range messages {
		if !seen[m] {
			t.Errorf("no log line %q", m)
		}
	}
}

// TestAgentWaitsForController: an agent started before the controller keeps trying, says so
// once, and its heartbeats arrive as soon as the controller listens.
func TestAgentWaitsForController(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	e := newEnv(t, "")
	k := newKubelet()
	defer k.srv.Close()
	p := e.startAgent(t, addr, k.srv.URL, interval)
	p.waitForLog(t, "cannot reach the controller", 5*time.Second)
	e.startServer(t, addr)
	e.next(t, 10*time.Second)
	beats(t, e, 3, true)
	if code := p.stop(t); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	if n := strings.Count(p.logs(), "cannot reach the controller"); n != 1 {
		t.Errorf("%d log lines about the unreachable controller, want 1", n)
	}
}

func TestAgentChecksItsCertificate(t *testing.T) {
	e := newEnv(t, "")
	out, err := exec.Command(agentBin, "--controller-address", "127.0.0.1:1", "--node-name", "node-2",
		"--cert", e.certFile, "--key", e.keyFile, "--ca", e.caFile).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), `names node "node-1"`) {
		t.Errorf("agent with another node's certificate: exit %d, output %q; want 1 and a message", code, out)
	}
	out, err = exec.Command(agentBin, "--node-name", "node-1").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "--controller-address is required") {
		t.Errorf("agent without flags: exit %d, output %q", code, out)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
