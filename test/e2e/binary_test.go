package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed/gobin"
)

type controllerProc struct {
	cmd             *exec.Cmd
	health, metrics string
	stderr          *os.File
}

// The real binary: two replicas elect one leader, serve health and metrics, log JSON; the
// leader fences a node on request; killing it hands leadership to the other.
func TestControllerBinaryLeaderElection(t *testing.T) {
	env := startScene(t, scenario.Options{})
	bin := buildController(t)
	a, b := startBinary(t, env.Cluster.KubeconfigPath(), bin), startBinary(t, env.Cluster.KubeconfigPath(), bin)
	for _, p := range []*controllerProc{a, b} {
		waitHTTP(t, p.health+"/readyz", "ok")
	}
	holder := waitLeader(t, env, "")
	leader := waitMaster(t, a, b)
	follower := otherOf(a, b, leader)
	patchAnnotations(t, env, env.Node(2).Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "binary test"})
	waitFence(t, env.Cluster, env.Node(2).Name(), time.Minute, phaseIs(v1alpha1.PhaseReleased))
	waitHTTP(t, leader.metrics+"/metrics", "palisade_fences_created_total")
	if isMaster(follower) {
		t.Error("both processes report themselves leader")
	}
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = leader.cmd.Wait()
	waitLeader(t, env, holder)
	if got := waitMaster(t, follower); got != follower {
		t.Error("the surviving process did not take over")
	}
	assertJSONLogs(t, a.stderr.Name())
}

// buildController builds palisade-controller into a temporary directory.
func buildController(t *testing.T) string {
	t.Helper()
	bin, err := gobin.Build("cmd/palisade-controller")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// startBinary runs palisade-controller against the API server of kubeconfig, with leader
// election in palisade-system, its logs in a file, and health and metrics on free ports.
func startBinary(t *testing.T, kubeconfig, bin string) *controllerProc {
	t.Helper()
	health, metrics := freeAddr(t), freeAddr(t)
	logf, err := os.Create(filepath.Join(t.TempDir(), "controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig,
		"--leader-election-namespace", scenario.SecretNamespace, "--leader-elect-lease-duration", "4s",
		"--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms",
		"--health-probe-bind-address", health, "--metrics-bind-address", metrics)
	cmd.Stderr, cmd.Stdout = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return &controllerProc{cmd: cmd, health: "http://" + health, metrics: "http://" + metrics, stderr: logf}
}

// waitLeader waits for a leader-election Lease holder other than not and returns it.
func waitLeader(t *testing.T, env *scenario.Env, not string) string {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l := &coordinationv1.Lease{}
		if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: scenario.SecretNamespace, Name: app.LeaderElectionID}, l); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return holder != "" && holder != not, nil
	})
	if err != nil {
		t.Fatalf("waiting for a leader other than %q: %v", not, err)
	}
	return holder
}

// isMaster reads client-go's leader-election metric from the process.
func isMaster(p *controllerProc) bool { return scenario.ReportsLeader(p.metrics) }

// waitMaster waits until one of ps reports itself leader and returns it.
func waitMaster(t *testing.T, ps ...*controllerProc) *controllerProc {
	t.Helper()
	var found *controllerProc
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, p := range ps {
			if isMaster(p) {
				found = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no process reports itself leader: %v", err)
	}
	return found
}

func otherOf(a, b, p *controllerProc) *controllerProc {
	if p == a {
		return b
	}
	return a
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitHTTP(t *testing.T, url, want string) {
	t.Helper()
	var body string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK && strings.Contains(body, want), nil
	})
	if err != nil {
		t.Fatalf("GET %s never answered 200 with %q: %v (last body %.200q)", url, want, err, body)
	}
}

func assertJSONLogs(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, bad := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil || m["msg"] == nil {
			bad++
			t.Logf("not a JSON log line: %.200s", sc.Text())
		}
	}
	if lines == 0 || bad > 0 {
		t.Errorf("%d of %d log lines are not zap JSON", bad, lines)
	}
}
