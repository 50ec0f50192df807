package realscene

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/gobin"
	"palisade.dev/palisade/test/testbed/machine"
	"palisade.dev/palisade/test/testbed/netns"
)

// ControllerUser is the user the controller processes act as (the test bed's admin
// kubeconfig): the checker counts its VolumeAttachment deletions as releases.
const ControllerUser = "admin"

// CreatePolicy creates the BMC Secret and the scene's FencingPolicy (IPMI, the given Lease
// timeout) over every machine, changed by edit, and returns it.
func (s *Scene) CreatePolicy(t testing.TB, leaseTimeout time.Duration, edit ...func(*v1alpha1.FencingPolicy)) *v1alpha1.FencingPolicy {
	t.Helper()
	ctx := context.Background()
	if err := s.Cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scenario.SecretNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: scenario.SecretName},
		StringData: map[string]string{"username": "admin", "password": "secret"}}
	if err := s.Cluster.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	p := scenario.NewPolicy(leaseTimeout)
	for _, e := range edit {
		e(p)
	}
	if err := s.Cluster.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// Controller is one palisade-controller process (a replica) in the scene's controller
// namespace on the LAN. Like a Deployment's pod under a kubelet, a process that exits on its
// own (a leader that lost its Lease exits) is started again after a back-off; Kill is a crash
// that stays down until Restart.
type Controller struct {
	bin, kubeconfig, dir string
	net                  *netns.Node
	heartbeat            string   // its agents' heartbeat server, "" without agents
	args                 []string // flags beyond the scene's

	mu      sync.Mutex
	cmd     *exec.Cmd
	metrics string
	gen     int // Kill and Restart end the supervision of the generation before
}

// Restart back-off of a controller process that exited on its own: the kubelet's.
const (
	restartBackoff    = 10 * time.Second
	maxRestartBackoff = 5 * time.Minute
)

// StartControllers builds palisade-controller and runs n replicas with leader election, in
// a network namespace of their own on the LAN (CutControllersFromAPI cuts it), reaching the
// API server through its relay.
func (s *Scene) StartControllers(t testing.TB, n int) []*Controller {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	bin, err := gobin.Build("cmd/palisade-controller")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Cluster.WriteKubeconfigVia(kubeconfig, s.Relay); err != nil {
		t.Fatal(err)
	}
	if s.controllerNet == nil {
		s.controllerNet = s.LAN.AddNode("controllers")
	}
	var cs []*Controller
	for range n {
		c := &Controller{bin: bin, kubeconfig: kubeconfig, dir: t.TempDir(), net: s.controllerNet}
		if s.agents != nil {
			addr, err := c.freeAddr()
			if err != nil {
				t.Fatal(err)
			}
			c.heartbeat, c.args = addr, s.agents.controllerArgs(addr)
			s.agents.add(c)
		}
		if err := c.Restart(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Kill()
			if t.Failed() {
				t.Logf("controller log (tail):\n%s", testbed.TailFile(c.LogPath(), 60))
			}
		})
		cs = append(cs, c)
	}
	return cs
}

// CutControllersFromAPI drops the controller replicas' traffic to the API server (their
// heartbeat servers stay reachable); HealControllers undoes it.
func (s *Scene) CutControllersFromAPI() error {
	api, err := netns.ParseEndpoint(s.Relay)
	if err != nil {
		return err
	}
	return s.controllerNet.Cut(api)
}

// UncutControllersFromAPI takes back one CutControllersFromAPI, leaving the others in force.
func (s *Scene) UncutControllersFromAPI() error {
	api, err := netns.ParseEndpoint(s.Relay)
	if err != nil {
		return err
	}
	return s.controllerNet.Uncut(api)
}

// CutFromControlPlane cuts machine m off from the control plane: the API server, the
// controllers and their heartbeat relay (everything on the host's LAN address and in the
// controllers' namespace). Its pods keep running, and its peers stay reachable.
func (s *Scene) CutFromControlPlane(m *machine.Machine) error {
	peers, err := s.controlPlane()
	if err != nil {
		return err
	}
	return m.Net().Cut(peers...)
}

// UncutFromControlPlane takes back one CutFromControlPlane, leaving the machine's other cuts.
func (s *Scene) UncutFromControlPlane(m *machine.Machine) error {
	peers, err := s.controlPlane()
	if err != nil {
		return err
	}
	return m.Net().Uncut(peers...)
}

// controlPlane is what CutFromControlPlane cuts: the host (API server) and the controllers.
func (s *Scene) controlPlane() ([]netns.Endpoint, error) {
	eps := []string{s.LAN.HostIP()}
	if s.controllerNet != nil {
		eps = append(eps, s.controllerNet.IP())
	}
	var peers []netns.Endpoint
	for _, e := range eps {
		p, err := netns.ParseEndpoint(e)
		if err != nil {
			return nil, err
		}
		peers = append(peers, p)
	}
	return peers, nil
}

// HealControllers undoes CutControllersFromAPI.
func (s *Scene) HealControllers() error {
	if s.controllerNet == nil {
		return nil
	}
	return s.controllerNet.Heal()
}

// Restart starts the process (again) and supervises it.
func (c *Controller) Restart() error {
	c.mu.Lock()
	c.gen++
	gen := c.gen
	c.mu.Unlock()
	done, err := c.start(gen)
	if err != nil {
		return err
	}
	go c.supervise(gen, done)
	return nil
}

// supervise starts the process again, after the back-off, each time it exits on its own.
func (c *Controller) supervise(gen int, done <-chan struct{}) {
	backoff := restartBackoff
	for {
		<-done
		time.Sleep(backoff)
		backoff = min(2*backoff, maxRestartBackoff)
		var err error
		if done, err = c.start(gen); err != nil {
			return // killed meanwhile, or no process could start
		}
	}
}

// start starts the process unless generation gen is over; done closes when it exits.
func (c *Controller) start(gen int) (<-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return nil, errors.New("killed")
	}
	metrics, err := c.freeAddr()
	if err != nil {
		return nil, err
	}
	health, err := c.freeAddr()
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(c.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := c.net.Command(context.Background(), c.bin, append([]string{"--kubeconfig", c.kubeconfig,
		"--leader-election-namespace", scenario.SecretNamespace, "--leader-elect-lease-duration", "4s",
		"--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms",
		"--health-probe-bind-address", health, "--metrics-bind-address", metrics}, c.args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	c.cmd, c.metrics = cmd, "http://"+metrics
	return done, nil
}

// Kill is SIGKILL: a controller crash, not restarted until Restart.
func (c *Controller) Kill() {
	c.mu.Lock()
	cmd := c.cmd
	c.cmd = nil
	c.gen++
	c.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
	}
}

// LogPath is the replica's log, every process it ran appending to it.
func (c *Controller) LogPath() string { return filepath.Join(c.dir, "controller.log") }

// Pause stops the process where it stands (SIGSTOP), as a long GC pause, a paused VM or a swap
// storm would: it keeps its sockets, its caches and its work in hand, and answers nothing.
// resume lets it go on (SIGCONT); it does nothing to a process killed or restarted since.
func (c *Controller) Pause() (resume func() error, err error) {
	c.mu.Lock()
	cmd := c.cmd
	c.mu.Unlock()
	if cmd == nil {
		return nil, errors.New("pausing the controller: it is not running")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("pausing the controller: %w", err)
	}
	return func() error {
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("letting the paused controller go on: %w", err)
		}
		return nil
	}, nil
}

// Leads says whether the process reports itself leader (client-go's leader-election metric).
func (c *Controller) Leads() bool {
	c.mu.Lock()
	running, metrics := c.cmd != nil, c.metrics
	c.mu.Unlock()
	return running && scenario.ReportsLeader(metrics)
}

// freeAddr is a free address in the controllers' namespace.
func (c *Controller) freeAddr() (string, error) {
	l, err := c.net.Listen("tcp", net.JoinHostPort(c.net.IP(), "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Running says whether the process was started and not killed since (it may be between a
// crash and its restart).
func (c *Controller) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd != nil
}

// ExecutorFirst edits a policy as deployed with agents: the Executor (a minute, each pod's own
// grace period) before the policy's other methods; a node whose kubelet alone is down is
// fenced only by it.
func ExecutorFirst(p *v1alpha1.FencingPolicy) {
	p.Spec.Methods = append([]v1alpha1.Method{{Name: "executor", Type: v1alpha1.MethodExecutor,
		Timeout: &metav1.Duration{Duration: time.Minute}, Executor: &v1alpha1.ExecutorMethod{}}}, p.Spec.Methods...)
}

// WaitLeader waits until one of the replicas leads and returns it.
func WaitLeader(t testing.TB, cs []*Controller, timeout time.Duration) *Controller {
	t.Helper()
	var leader *Controller
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, c := range cs {
			if c.Leads() {
				leader = c
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no controller replica leads within %s", timeout)
	}
	return leader
}
