package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed/gobin"
)

// Invariant 4: the API server says node 1 is gone (its Lease stops), but its agent keeps
// heartbeating straight to the controller over mTLS: no power-off, and the Node says why. Once
// the agent falls silent too, the node is Dead and is fenced.
func TestAgentAliveMeansNoPowerOff(t *testing.T) {
	env := startScene(t, scenario.Options{})
	dir := t.TempDir()
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	files := writeCerts(t, dir, ca)
	addr := freeAddr(t)
	err = env.StartController(context.Background(), func(o *app.Options) {
		o.Agents = channel.ServerOptions{Addr: addr, CertFile: files["server.crt"], KeyFile: files["server.key"], CAFile: files["ca.crt"]}
	})
	if err != nil {
		t.Fatal(err)
	}
	kubelet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer kubelet.Close()
	n1 := env.Node(1)
	agentProc := startAgent(t, dir, addr, n1.Name(), kubelet.URL, files)

	n1.PauseHeartbeats() // the API server's view: Lease no longer renewed
	time.Sleep(leaseTimeout + 5*time.Second)
	err = env.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: n1.Name()}, &v1alpha1.NodeFence{})
	if err == nil || client.IgnoreNotFound(err) != nil {
		t.Fatalf("a NodeFence exists for %s although its agent heartbeats (err %v)", n1.Name(), err)
	}
	if offs, err := n1.BMC.OffCommands(); err != nil || offs != 0 {
		t.Fatalf("%d power-off commands reached the BMC of a node seen alive (err %v)", offs, err)
	}
	// The event may come after the sleep on a loaded machine (a fresh-clone run saw the
	// controller answer heartbeats 6 s late): look for it for a while.
	var events []string
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		events = eventsFor(t, env, "Node", n1.Name())
		return hasEvent(events, "NodeAliveNotFencing") && strings.Contains(strings.Join(events, "\n"), "Partitioned"), nil
	})
	if err != nil {
		t.Errorf("no NodeAliveNotFencing event naming Partitioned on the node; events: %v", events)
	}

	if err := agentProc.Process.Kill(); err != nil { // the agent falls silent too: no signal on any path
		t.Fatal(err)
	}
	_ = agentProc.Wait()
	nf := waitFence(t, env.Cluster, n1.Name(), time.Minute, phaseIs(v1alpha1.PhaseReleased))
	if !strings.Contains(nf.Spec.Reason, "Dead") {
		t.Errorf("fence reason %q, want a Dead verdict", nf.Spec.Reason)
	}
}

func writeCerts(t *testing.T, dir string, ca *pki.CA) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, name := range []string{"ca.crt", "server.crt", "server.key", "node-1.crt", "node-1.key"} {
		files[name] = filepath.Join(dir, name)
	}
	if err := os.WriteFile(files["ca.crt"], ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	server, err := ca.IssueServer([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := server.WriteFiles(files["server.crt"], files["server.key"]); err != nil {
		t.Fatal(err)
	}
	node, err := ca.IssueAgent("node-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := node.WriteFiles(files["node-1.crt"], files["node-1.key"]); err != nil {
		t.Fatal(err)
	}
	return files
}

// buildAgent builds palisade-agent and, next to it where the agent looks for it,
// palisade-executor (once per test process), and returns the agent's path.
func buildAgent(t *testing.T) string {
	t.Helper()
	dir, err := gobin.BuildAll(nil, "cmd/palisade-agent", "cmd/palisade-executor")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "palisade-agent")
}

// startAgent starts the agent of node, heartbeating to addr every 500 ms, and waits until the
// controller has accepted a heartbeat from it.
func startAgent(t *testing.T, dir, addr, node, kubelet string, files map[string]string, extra ...string) *exec.Cmd {
	t.Helper()
	bin := buildAgent(t)
	args := []string{"--controller-address", addr, "--node-name", node, "--cert", files[node+".crt"],
		"--key", files[node+".key"], "--ca", files["ca.crt"], "--interval", "500ms", "--kubelet-healthz", kubelet + "/healthz",
		"--probe-address", "127.0.0.1:0", "--kubelet-port", "0", "--state-dir", filepath.Join(dir, node+"-state")}
	cmd := exec.Command(bin, append(args, extra...)...)
	// The agent's log goes to a file, shown only when the test fails: on success it would bury
	// the failures of other tests in `make test`'s output.
	logPath := filepath.Join(dir, node+"-agent.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		_ = log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("palisade-agent log of %s:\n%s", node, b)
		}
	})
	// The controller has heard the agent before the test cuts anything: a first heartbeat
	// answered later than the Lease's timeout on a loaded machine would have the node judged
	// without an agent, and the test see another path than the one it stands for.
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(logPath)
		return err == nil && strings.Contains(string(b), `"heartbeats accepted by the controller"`), nil
	})
	if err != nil {
		t.Fatalf("the agent of %s had no heartbeat accepted by the controller within a minute", node)
	}
	return cmd
}
