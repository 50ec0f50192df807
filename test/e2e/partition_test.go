package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed/containerd"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/testbed/simkubelet/simkubelettest"
	"palisade.dev/palisade/test/testbed/simnode"
)

// partitionScene is three simulated nodes whose processes — a kubelet stand-in (simkubelet:
// the node's Lease, its healthz and its port 10250) and a real palisade-agent — run in network
// namespaces of their own on a bridged LAN, with the API server (through a relay), the
// controller and the BMC simulators on the root side. Tests cut links with nftables inside a
// node's namespace. Node 1 runs the database pod, and its agent drives a real containerd in
// which the pod's workload container runs (ignoring SIGTERM).
type partitionScene struct {
	env      *scenario.Env
	lan      *netns.LAN
	ns       []*netns.Node
	kubelets []*simkubelettest.Process
	agents   []*agentInNS
	relay    netns.Endpoint // the API server, as the nodes reach it
	hb       netns.Endpoint // the controller's heartbeat server
	ctr      *containerd.Containerd
	pod      *containerd.RunningPod
	w        *scenario.Workload
}

// agentInNS is a palisade-agent running in a node's namespace.
type agentInNS struct {
	mu   sync.Mutex
	logs bytes.Buffer
	kill func()
}

func (a *agentInNS) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.logs.Write(p)
}

func (a *agentInNS) Logs() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.logs.String()
}

func startPartitionScene(t *testing.T) *partitionScene {
	t.Helper()
	ctx := context.Background()
	s := &partitionScene{lan: netns.New(t)}
	for i := 1; i <= 3; i++ {
		s.ns = append(s.ns, s.lan.AddNode(fmt.Sprintf("node-%d", i)))
	}
	s.env = startScene(t, scenario.Options{Nodes: 3,
		Node: func(i int, o *simnode.Options) { o.ExternalLease, o.InternalIP = true, s.ns[i-1].IP() },
		Policy: func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods = []v1alpha1.Method{executorMethod(30 * time.Second), p.Spec.Methods[0]}
		}})
	apiURL, err := url.Parse(s.env.Cluster.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	relay := s.lan.Relay(t, apiURL.Host)
	if s.relay, err = netns.ParseEndpoint(relay); err != nil {
		t.Fatal(err)
	}
	// The kubelet stand-ins renew the Leases before the controller looks: a node registered
	// longer ago than the Lease timeout without a Lease is rightly Dead.
	kubeconfig := simkubelettest.WriteKubeconfig(t, s.env.Cluster.Config, relay)
	for _, n := range s.ns {
		s.kubelets = append(s.kubelets, simkubelettest.Start(t, n, simkubelettest.Options{Kubeconfig: kubeconfig, NodeName: n.Name(), RenewInterval: renew}))
	}

	// The controller, its heartbeat server on the LAN side of the root namespace.
	dir := t.TempDir()
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	files := writeCerts(t, dir, ca)
	server, err := ca.IssueServer([]string{"127.0.0.1", s.lan.HostIP()})
	if err == nil {
		err = server.WriteFiles(files["server.crt"], files["server.key"])
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node-2", "node-3"} {
		pair, err := ca.IssueAgent(n)
		files[n+".crt"], files[n+".key"] = filepath.Join(dir, n+".crt"), filepath.Join(dir, n+".key")
		if err == nil {
			err = pair.WriteFiles(files[n+".crt"], files[n+".key"])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(s.lan.HostIP(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	hbAddr := lis.Addr().String()
	_ = lis.Close()
	if s.hb, err = netns.ParseEndpoint(hbAddr); err != nil {
		t.Fatal(err)
	}
	err = s.env.StartController(ctx, func(o *app.Options) {
		o.Agents = channel.ServerOptions{Addr: hbAddr, CertFile: files["server.crt"], KeyFile: files["server.key"], CAFile: files["ca.crt"]}
	})
	if err != nil {
		t.Fatal(err)
	}

	// Node 1's runtime and workload, then the database on node 1.
	s.ctr = containerd.StartT(t)
	if err := s.ctr.ImportImage(ctx, containerd.Image{Name: workloadImage, Cmd: []string{"sh", "-c", "trap '' TERM; while true; do sleep 1; done"}}); err != nil {
		t.Fatal(err)
	}
	if s.pod, err = s.ctr.RunPod(ctx, containerd.Pod{Name: "db-0", Namespace: "default", UID: "db-0-uid",
		Containers: []containerd.Container{{Name: "db", Image: workloadImage}}}); err != nil {
		t.Fatal(err)
	}

	// Every node's agent, in its namespace.
	api := agentAPIArgs(t, s.env, "https://"+relay, simkubelettest.ServerName(t, s.env.Cluster.Config))
	bin := buildAgent(t)
	for i, n := range s.ns {
		name := n.Name()
		k := s.kubelets[i]
		args := append([]string{"--controller-address", hbAddr, "--node-name", name, "--cert", files[name+".crt"], "--key", files[name+".key"],
			"--ca", files["ca.crt"], "--interval", "500ms", "--kubelet-healthz", "http://127.0.0.1:10248/healthz",
			"--probe-address", ":9444", "--kubelet-port", "10250", "--state-dir", filepath.Join(dir, name+"-state")}, api...)
		if i == 0 {
			// Stopping "the kubelet" is stopping node 1's stand-in, so that nothing renews its Lease.
			args = append(args, "--cri-endpoint", s.ctr.Socket, "--kubelet-stop-command", "kill "+strconv.Itoa(k.Pid())+" 2>/dev/null; true")
		}
		s.agents = append(s.agents, startAgentInNS(t, n, bin, args))
	}
	s.w = deploy(t, s.env)
	s.waitPeersSeeEachOther(t)
	return s
}

func startAgentInNS(t *testing.T, n *netns.Node, bin string, args []string) *agentInNS {
	t.Helper()
	a := &agentInNS{}
	cmd := n.Command(context.Background(), bin, args...)
	cmd.Stderr = a
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	a.kill = sync.OnceFunc(func() { _ = cmd.Process.Kill(); <-done })
	t.Cleanup(func() {
		a.kill()
		if t.Failed() {
			t.Logf("agent of %s:\n%s", n.Name(), a.Logs())
		}
	})
	return a
}

// waitPeersSeeEachOther waits until every agent has logged each of its two peers reachable.
func (s *partitionScene) waitPeersSeeEachOther(t *testing.T) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		for _, a := range s.agents {
			if strings.Count(a.Logs(), `"peer reachability"`) < 2 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("agents did not start probing each other: %v", err)
	}
}

// powerWatch kills node i's processes the moment its BMC cuts the power: the machine is gone.
func (s *partitionScene) powerWatch(t *testing.T, i int) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
			on, err := s.env.Node(i).BMC.PoweredOn()
			if err != nil || on {
				return false, nil
			}
			s.agents[i-1].kill()
			_ = s.kubelets[i-1].Kill()
			return true, nil
		})
	}()
}

func (s *partitionScene) noPowerOff(t *testing.T) {
	t.Helper()
	if offs, err := s.env.Node(1).BMC.OffCommands(); err != nil || offs != 0 {
		t.Errorf("%d power-off commands reached node 1's BMC (err %v); the node was alive", offs, err)
	}
}

func (s *partitionScene) workloadRunning(t *testing.T) bool {
	t.Helper()
	es := &executorScene{ctr: s.ctr, pod: s.pod}
	return es.workloadRunning(t)
}

// TestPartitions cuts real network links around node 1 and checks what Palisade makes of it.
func TestPartitions(t *testing.T) {
	t.Run("API server cut off: Partitioned, executor over the direct channel", func(t *testing.T) {
		s := startPartitionScene(t)
		if err := s.ns[0].Cut(s.relay); err != nil { // the kubelet and the agent lose the API server
			t.Fatal(err)
		}
		nf := waitFence(t, s.env.Cluster, "node-1", 90*time.Second, phaseIs(v1alpha1.PhaseReleased))
		if nf.Spec.Verdict != "Partitioned" || nf.Status.Method != "executor" || !strings.Contains(stepMessage(nf, "Terminate"), "over the direct channel") {
			t.Errorf("verdict %q method %q terminate step %q; want Partitioned, the executor, over the direct channel", nf.Spec.Verdict, nf.Status.Method, stepMessage(nf, "Terminate"))
		}
		if _, ok := nf.Annotations[v1alpha1.AnnotationExecutorStatus]; ok {
			t.Error("an answer through the API server from an agent cut off from it")
		}
		if s.workloadRunning(t) {
			t.Error("the workload container still runs after a confirmed termination")
		}
		s.noPowerOff(t)
	})
	t.Run("kubelet killed: KubeletDown, executor through the API server", func(t *testing.T) {
		s := startPartitionScene(t)
		if err := s.kubelets[0].Kill(); err != nil {
			t.Fatal(err)
		}
		nf := waitFence(t, s.env.Cluster, "node-1", 90*time.Second, phaseIs(v1alpha1.PhaseReleased))
		if nf.Spec.Verdict != "KubeletDown" || nf.Status.Method != "executor" || !strings.Contains(stepMessage(nf, "Terminate"), "through the API server") {
			t.Errorf("verdict %q method %q terminate step %q; want KubeletDown, the executor, through the API server", nf.Spec.Verdict, nf.Status.Method, stepMessage(nf, "Terminate"))
		}
		if _, ok := nf.Annotations[v1alpha1.AnnotationExecutorStatus]; !ok {
			t.Error("no answer from the agent on the NodeFence")
		}
		if s.workloadRunning(t) {
			t.Error("the workload container still runs after a confirmed termination")
		}
		s.noPowerOff(t)
	})
	t.Run("everything cut: Dead, power-off through the BMC", func(t *testing.T) {
		s := startPartitionScene(t)
		s.powerWatch(t, 1)
		start := time.Now()
		if err := s.ns[0].CutAll(); err != nil {
			t.Fatal(err)
		}
		nf := waitFence(t, s.env.Cluster, "node-1", 90*time.Second, phaseIs(v1alpha1.PhaseReleased))
		t.Logf("released %s after everything was cut", time.Since(start).Round(100*time.Millisecond))
		if nf.Spec.Verdict != "Dead" || nf.Status.Method != "ipmi" {
			t.Errorf("verdict %q method %q; want Dead, fenced by power-off", nf.Spec.Verdict, nf.Status.Method)
		}
		if on, err := s.env.Node(1).BMC.PoweredOn(); err != nil || on {
			t.Errorf("node 1 powered on: %v (err %v)", on, err)
		}
	})
	t.Run("node to node cut only: no fence", func(t *testing.T) {
		s := startPartitionScene(t)
		if err := s.ns[0].CutNodes(s.ns[1], s.ns[2]); err != nil {
			t.Fatal(err)
		}
		// Longer than the Lease timeout and many heartbeat intervals.
		time.Sleep(leaseTimeout + 5*time.Second)
		var fences v1alpha1.NodeFenceList
		if err := s.env.Cluster.Client.List(context.Background(), &fences); err != nil {
			t.Fatal(err)
		}
		if len(fences.Items) != 0 {
			t.Errorf("%d NodeFence(s) although only node-to-node links were cut: %s: %s", len(fences.Items), fences.Items[0].Name, fences.Items[0].Spec.Reason)
		}
		// The cut was real: node 1's peers lost it, and it lost them.
		for i, a := range s.agents {
			if !strings.Contains(a.Logs(), `"reachable":false`) {
				t.Errorf("the agent of node-%d never found a peer unreachable: the cut did not take", i+1)
			}
		}
		s.noPowerOff(t)
		if !s.workloadRunning(t) {
			t.Error("the workload container was stopped although nothing was fenced")
		}
	})
}
