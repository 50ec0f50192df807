package realscene

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/test/agentapi"
	"palisade.dev/palisade/test/testbed/gobin"
	"palisade.dev/palisade/test/testbed/machine"
	"palisade.dev/palisade/test/testbed/netns"
)

// AgentDaemon is the name of the machines' palisade-agent daemon (machine.KillDaemon).
const AgentDaemon = "palisade-agent"

// AgentProbePort is the port the agents accept their peers' probes on, KubeletPort the
// kubelet's port, which peers probe too.
const (
	AgentProbePort = 9444
	KubeletPort    = 10250
)

// AgentInterval is the agents' heartbeat interval, the product's default.
const AgentInterval = "1s"

// SelfFenceTerminateWithin is the agents' --executor-timeout when they fence themselves
// (Options.SelfFenceAfter): the time limit of their termination, which the scenes' SelfFence
// safeAfter covers besides --self-fence-after and four heartbeat intervals (what the agents
// promise is --self-fence-after plus twice their watchdog's timeout: Options.Watchdog). It leaves the
// witness pods their 5 s grace period (executor.GraceWithin: the limit less the 10 s read-back
// of SIGKILL and 3 s).
const SelfFenceTerminateWithin = 18 * time.Second

// agents is what the scene's node agents need: the binaries, the certificates of the agents
// and of the controllers' heartbeat server, and the heartbeat address on the LAN.
type agents struct {
	bin   string // palisade-agent, palisade-executor next to it
	files map[string]string
	api   []string // the flags of the agents' API access
	// kubeletStop is the agents' kubelet-stop command, "" for none.
	kubeletStop string
	// selfFence are the agents' self-fence flags, none when they do not fence themselves.
	selfFence []string
	// watchdog is the timeout of the machines' stand-in watchdogs (Options.Watchdog), 0: none.
	watchdog time.Duration
	dir      string // where the certificates and the watchdogs' FIFOs are
	// Heartbeat is the LAN address the agents send to: a relay to the leading controller's
	// heartbeat server, standing in for the Service that follows the leader's pod label
	// (no kube-proxy runs here).
	heartbeat string

	mu          sync.Mutex
	controllers []*Controller
}

// setupAgents builds the agent, issues the certificates and opens the heartbeat relay.
func (s *Scene) setupAgents(t testing.TB, kubeletLeftRunning bool, selfFenceAfter, watchdog time.Duration) *agents {
	t.Helper()
	dir := t.TempDir()
	bins, err := gobin.BuildAll(nil, "cmd/palisade-agent", "cmd/palisade-executor")
	if err != nil {
		t.Fatal(err)
	}
	a := &agents{bin: filepath.Join(bins, "palisade-agent"), files: map[string]string{}, kubeletStop: "pkill -KILL -x kubelet; true", dir: dir}
	if kubeletLeftRunning {
		a.kubeletStop = ""
	}
	if selfFenceAfter > 0 {
		a.selfFence = []string{"--self-fence-after", selfFenceAfter.String(), "--api-server-healthz", "https://" + s.Relay + "/readyz",
			"--executor-timeout", SelfFenceTerminateWithin.String()}
		a.watchdog = watchdog
	}
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	a.files["ca.crt"] = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(a.files["ca.crt"], ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	issue := func(name string, pair *pki.KeyPair, err error) {
		a.files[name+".crt"], a.files[name+".key"] = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		if err == nil {
			err = pair.WriteFiles(a.files[name+".crt"], a.files[name+".key"])
		}
		if err != nil {
			t.Fatalf("issuing the certificate of %s: %v", name, err)
		}
	}
	pair, err := ca.IssueServer([]string{"127.0.0.1", s.LAN.HostIP()})
	issue("heartbeat-server", pair, err)
	for i := 1; i <= s.machines; i++ {
		pair, err := ca.IssueAgent(NodeName(i))
		issue(NodeName(i), pair, err)
	}
	if a.api, err = agentapi.Args(context.Background(), s.Cluster.Kube, s.Cluster.Config.CAData, dir, "https://"+s.Relay, "localhost"); err != nil {
		t.Fatal(err)
	}
	a.heartbeat = s.LAN.RelayTo(t, "the leading controller's heartbeat server", a.leader)
	return a
}

// daemon is machine i's palisade-agent: heartbeats every AgentInterval through the relay,
// peers probed on the LAN, the machine's kubelet and containerd for orders, which come in
// heartbeat answers or, for a node whose kubelet is down, through the API server (a
// ServiceAccount token, as in a pod); its kubelet-stop command kills the machine's kubelet
// (whose PID namespace is the agent's own) unless the scene leaves the kubelet running; it
// fences its node itself when the scene says so (Options.SelfFenceAfter), petting the machine's
// stand-in watchdog dog when it has one.
func (a *agents) daemon(i int, dog *watchdogStandIn) machine.Daemon {
	node := NodeName(i)
	selfFence := a.selfFence
	if dog != nil {
		selfFence = append(slices.Clip(selfFence), "--watchdog-device", dog.path, "--watchdog-timeout", dog.timeout.String(), "--watchdog-stand-in")
	}
	return machine.Daemon{Name: AgentDaemon, Path: a.bin, Args: append([]string{
		"--controller-address", a.heartbeat, "--node-name", node,
		"--cert", a.files[node+".crt"], "--key", a.files[node+".key"], "--ca", a.files["ca.crt"],
		"--interval", AgentInterval, "--kubelet-healthz", "http://127.0.0.1:10248/healthz",
		"--probe-address", "$(NODE_IP):" + strconv.Itoa(AgentProbePort), "--probe-advertise-host", "$(NODE_IP)", "--kubelet-port", strconv.Itoa(KubeletPort),
		"--cri-endpoint", "$(CONTAINERD_SOCKET)", "--kubelet-stop-command", a.kubeletStop, "--state-dir", "$(STATE_DIR)",
	}, slices.Concat(selfFence, a.api)...)}
}

// controllerArgs are a controller replica's flags for its heartbeat server at addr.
func (a *agents) controllerArgs(addr string) []string {
	return []string{"--agent-listen-address", addr, "--agent-tls-cert", a.files["heartbeat-server.crt"],
		"--agent-tls-key", a.files["heartbeat-server.key"], "--agent-ca", a.files["ca.crt"]}
}

func (a *agents) add(c *Controller) {
	a.mu.Lock()
	a.controllers = append(a.controllers, c)
	a.mu.Unlock()
}

// leader is the heartbeat address of the replica that leads, "" when none does.
func (a *agents) leader() string {
	a.mu.Lock()
	cs := append([]*Controller(nil), a.controllers...)
	a.mu.Unlock()
	for _, c := range cs {
		if c.Leads() {
			return c.heartbeat
		}
	}
	return ""
}

// WaitAgents waits until every machine's agent has had heartbeats accepted by the controller
// and has reported both of its peers' reachability: a fault struck earlier would leave the
// verdict to the Lease alone.
func (s *Scene) WaitAgents(t testing.TB, timeout time.Duration) {
	t.Helper()
	for _, m := range s.Machines {
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			log := m.LogTail(AgentDaemon, 10000)
			return strings.Contains(log, "heartbeats accepted by the controller") && strings.Count(log, `"peer reachability"`) >= len(s.Machines)-1, nil
		})
		if err != nil {
			t.Fatalf("the agent of %s was not heard, or did not report its peers, within %s:\n%s", m.Name(), timeout, m.LogTail(AgentDaemon, 20))
		}
	}
}

// CutHeartbeats drops, in every machine's namespace, the traffic to and from the controllers'
// heartbeat relay: the agents' heartbeats (and the peer reports they carry) no longer reach the
// controller, while the machines reach the API server and each other (a heartbeat Service
// without endpoints, a network policy, a certificate gone wrong). False without agents.
func (s *Scene) CutHeartbeats() (bool, error) {
	return s.heartbeatCut(func(m *machine.Machine, ep netns.Endpoint) error { return m.Net().Cut(ep) })
}

// UncutHeartbeats takes back one CutHeartbeats, leaving the machines' other cuts.
func (s *Scene) UncutHeartbeats() error {
	_, err := s.heartbeatCut(func(m *machine.Machine, ep netns.Endpoint) error { return m.Net().Uncut(ep) })
	return err
}

func (s *Scene) heartbeatCut(do func(*machine.Machine, netns.Endpoint) error) (bool, error) {
	if s.agents == nil {
		return false, nil
	}
	ep, err := netns.ParseEndpoint(s.agents.heartbeat)
	if err != nil {
		return false, err
	}
	var errs []error
	for _, m := range s.Machines {
		errs = append(errs, do(m, ep))
	}
	return true, errors.Join(errs...)
}
