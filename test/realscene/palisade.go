package realscene

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"palisade.dev/palisade/test/scenario"
)

// leaderLease is the controller's leader-election Lease.
const leaderLease = "palisade-controller.fencing.palisade.dev"

// ControllerUser is the user the controller processes act as (the test bed's admin
// kubeconfig): the checker counts its VolumeAttachment deletions as releases.
const ControllerUser = "admin"

// CreatePolicy creates the BMC Secret and the scene's FencingPolicy (IPMI, the given Lease
// timeout) over every machine.
func (s *Scene) CreatePolicy(t testing.TB, leaseTimeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	if err := s.Cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scenario.SecretNamespace}}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: scenario.SecretName},
		StringData: map[string]string{"username": "admin", "password": "secret"}}
	if err := s.Cluster.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := s.Cluster.Client.Create(ctx, scenario.NewPolicy(leaseTimeout)); err != nil {
		t.Fatal(err)
	}
}

// Controller is one palisade-controller process (a replica); Restart brings a killed one back.
type Controller struct {
	bin, kubeconfig, dir string

	mu      sync.Mutex
	cmd     *exec.Cmd
	metrics string
}

// StartControllers builds palisade-controller and runs n replicas with leader election.
func (s *Scene) StartControllers(t testing.TB, n int) []*Controller {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "palisade-controller")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(moduleDir(), "cmd", "palisade-controller")).CombinedOutput(); err != nil {
		t.Fatalf("building palisade-controller: %v\n%s", err, out)
	}
	var cs []*Controller
	for range n {
		c := &Controller{bin: bin, kubeconfig: s.Cluster.KubeconfigPath(), dir: t.TempDir()}
		if err := c.Restart(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Kill()
			if t.Failed() {
				b, _ := os.ReadFile(filepath.Join(c.dir, "controller.log"))
				if len(b) > 3000 {
					b = b[len(b)-3000:]
				}
				t.Logf("controller log (tail):\n%s", b)
			}
		})
		cs = append(cs, c)
	}
	return cs
}

// Restart starts the process (again).
func (c *Controller) Restart() error {
	metrics, err := freeAddr()
	if err != nil {
		return err
	}
	health, err := freeAddr()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(c.dir, "controller.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, "--kubeconfig", c.kubeconfig,
		"--leader-election-namespace", scenario.SecretNamespace, "--leader-elect-lease-duration", "4s",
		"--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms",
		"--health-probe-bind-address", health, "--metrics-bind-address", metrics)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	go func() { _ = cmd.Wait(); log.Close() }()
	c.mu.Lock()
	c.cmd, c.metrics = cmd, "http://"+metrics
	c.mu.Unlock()
	return nil
}

// Kill is SIGKILL: a controller crash.
func (c *Controller) Kill() {
	c.mu.Lock()
	cmd := c.cmd
	c.cmd = nil
	c.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
	}
}

// Leads says whether the process reports itself leader (client-go's leader-election metric).
func (c *Controller) Leads() bool {
	c.mu.Lock()
	running, metrics := c.cmd != nil, c.metrics
	c.mu.Unlock()
	if !running {
		return false
	}
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(metrics + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), `leader_election_master_status{name="`+leaderLease+`"} 1`)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Running says whether the process was started and not killed since.
func (c *Controller) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd != nil
}
