package e2e

import (
	"strings"
	"testing"
	"time"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/realscene"
	"palisade.dev/palisade/test/testbed/machine"
	"palisade.dev/palisade/test/testbed/netns"
)

// realPartitionLease is the policy's Lease timeout in the real-machine partition tests.
const realPartitionLease = 20 * time.Second

// realPartition is three real machines with their agents and db-0 of the witness StatefulSet
// writing from one of them (on an RWO volume): the machine the tests cut links around.
type realPartition struct {
	s     *realscene.Scene
	node  string // db-0's node
	uid   string // db-0's pod UID
	m     *machine.Machine
	peers []*machine.Machine
	fault time.Time // when the fault struck
}

// startRealPartition starts the scene with the policy as deployed with agents (the Executor,
// then IPMI) and one controller, and waits until every agent is heard and probes its peers.
func startRealPartition(t *testing.T, kubeletLeftRunning bool) *realPartition {
	t.Helper()
	s := realscene.Start(t, realscene.Options{Machines: 3, Agents: true, Volumes: true, KubeletLeftRunning: kubeletLeftRunning})
	s.CreatePolicy(t, realPartitionLease, realscene.ExecutorFirst)
	s.StartControllers(t, 1)
	s.DeployWitness(t, 1)
	s.WaitAgents(t, time.Minute)
	p := &realPartition{s: s}
	p.node, p.uid = s.WaitWriter(t, realscene.PodName(0), "", time.Minute)
	p.m = s.Machine(p.node)
	for _, m := range s.Machines {
		if m != p.m {
			p.peers = append(p.peers, m)
		}
	}
	return p
}

// fencedByExecutor checks what is common to a fence by the Executor: the fence released with
// the given verdict and the Terminate step's channel, db-0 writing again from another node on
// its volume, the machine never powered off, and the store's history and the audit clean.
func (p *realPartition) fencedByExecutor(t *testing.T, verdict, channel string) {
	t.Helper()
	nf := waitFence(t, p.s.Cluster, p.node, 3*time.Minute, phaseIs(v1alpha1.PhaseReleased))
	if string(nf.Spec.Verdict) != verdict || nf.Status.Method != "executor" || !strings.Contains(stepMessage(nf, "Terminate"), channel) {
		t.Errorf("verdict %q method %q terminate step %q; want %s, the executor, %s", nf.Spec.Verdict, nf.Status.Method, stepMessage(nf, "Terminate"), verdict, channel)
	}
	second, uid := p.s.WaitWriter(t, realscene.PodName(0), p.node, 2*time.Minute)
	waitAttached(t, p.s, "pv-"+realscene.PodName(0), second)
	p.logTimes(t, nf, second, uid)
	// The executor stopped the kubelet before the pods: a kubelet left running would start
	// db-0's container again from its own desired state.
	if pids, err := p.m.Processes("kubelet"); err != nil || len(pids) != 0 {
		t.Errorf("the kubelet of %s runs after the Executor's fence: pids %v (%v)", p.node, pids, err)
	}
	p.noPowerOff(t)
	p.clean(t, true)
}

// orderNotCarriedOutAgain brings the kubelet of the fenced machine back (as its operator
// would, to repair it) and restarts its agent (a rollout, an OOM kill): the agent reads its
// NodeFence again, whose fence is over, and must not carry its order out again. Before, the
// order stayed on the NodeFence and the restarted agent, its token still the highest on disk,
// stopped the kubelet again.
func (p *realPartition) orderNotCarriedOutAgain(t *testing.T) {
	t.Helper()
	if err := p.m.StartKubelet(); err != nil {
		t.Fatal(err)
	}
	if err := p.m.KillDaemon(realscene.AgentDaemon); err != nil {
		t.Fatal(err)
	}
	if err := p.m.StartDaemon(realscene.AgentDaemon); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if pids, err := p.m.Processes("kubelet"); err != nil || len(pids) == 0 {
			t.Fatalf("the kubelet of %s was stopped again after its agent restarted (pids %v, %v): the fence's order was carried out again", p.node, pids, err)
		}
	}
	if order, ok := fenceOf(t, p.s, p.node).Annotations[v1alpha1.AnnotationExecutorCommand]; ok {
		t.Errorf("the order %s is still on the NodeFence of a fence released", order)
	}
}

// logTimes logs, from the fault, when the fence was created, confirmed and released, and when
// the store accepted the first write of db-0's replacement (pod UID uid) on node second.
func (p *realPartition) logTimes(t *testing.T, nf *v1alpha1.NodeFence, second, uid string) {
	t.Helper()
	since := func(at time.Time) string { return at.Sub(p.fault).Round(100 * time.Millisecond).String() }
	var confirmed, released string
	if nf.Status.FencedTime != nil {
		confirmed = since(nf.Status.FencedTime.Time)
	}
	if nf.Status.ReleasedTime != nil {
		released = since(nf.Status.ReleasedTime.Time)
	}
	first, _ := p.s.Store.FirstAppend(uid)
	t.Logf("from the fault: NodeFence %s (verdict %s), fence by %s confirmed %s, released %s; db-0's first write from %s %s",
		since(nf.CreationTimestamp.Time), nf.Spec.Verdict, nf.Status.Method, confirmed, released, second, since(first.Arrival))
}

// cutFromAPIServer cuts db-0's machine from the API server alone: its kubelet and its agent
// lose it, the heartbeats to the controller and the peers' probes go on.
func (p *realPartition) cutFromAPIServer(t *testing.T) {
	t.Helper()
	api, err := netns.ParseEndpoint(p.s.Relay)
	if err != nil {
		t.Fatal(err)
	}
	p.fault = time.Now()
	if err := p.m.Net().Cut(api); err != nil {
		t.Fatal(err)
	}
}

// noPowerOff checks that no BMC was sent a power-off and every machine still runs.
func (p *realPartition) noPowerOff(t *testing.T) {
	t.Helper()
	for _, m := range p.s.Machines {
		if offs, err := p.s.BMC(m.Name()).OffCommands(); err != nil || offs != 0 {
			t.Errorf("%d power-off commands reached the BMC of %s (err %v)", offs, m.Name(), err)
		}
		if !m.Running() {
			t.Errorf("%s is not running", m.Name())
		}
	}
}

// clean checks the store's history (one copy of db-0 at a time) and the audit of writes (no
// release before a confirmed fence; no fence of a node but the struck one, when struck, and
// none before the fault struck it).
func (p *realPartition) clean(t *testing.T, struck bool) {
	t.Helper()
	h, evs := p.s.History(t), p.s.Audit(t)
	v := append(checker.OneCopy(h, 0), checker.NoEarlyRelease(evs, []string{realscene.ControllerUser})...)
	var mayFence map[string]time.Time
	if struck {
		mayFence = map[string]time.Time{p.node: p.fault}
	}
	v = append(v, checker.NoHealthyFenced(evs, mayFence, nil)...)
	if len(v) > 0 {
		t.Errorf("%s", checker.Report(v))
	}
}

// TestRealMachinesPartitions cuts links around db-0's machine — three real machines, real
// kubelets, a real palisade-agent on each — and checks what Palisade makes of each cut, on the
// witness store's history as well as on the NodeFence. The real kubelet makes these truer than
// TestPartitions: a kubelet cut off from the API server keeps its pods running and would start
// them again, so the Executor must stop it first.
func TestRealMachinesPartitions(t *testing.T) {
	t.Run("API server cut off: Partitioned, the Executor over the direct channel", func(t *testing.T) {
		p := startRealPartition(t, false)
		p.cutFromAPIServer(t)
		p.fencedByExecutor(t, "Partitioned", "over the direct channel")
		nf := fenceOf(t, p.s, p.node)
		if _, ok := nf.Annotations[v1alpha1.AnnotationExecutorStatus]; ok {
			t.Error("an answer through the API server from an agent cut off from it")
		}
	})
	t.Run("API server cut off, agent without a kubelet-stop command: the workload runs again, the BMC powers the machine off", func(t *testing.T) {
		p := startRealPartition(t, true)
		p.cutFromAPIServer(t)
		nf := waitFence(t, p.s.Cluster, p.node, 3*time.Minute, phaseIs(v1alpha1.PhaseReleased))
		var disproved *v1alpha1.Step
		for i, st := range nf.Status.Steps {
			if st.Name == v1alpha1.StepVerifyFenced && st.Method == "executor" {
				disproved = &nf.Status.Steps[i]
			}
		}
		if disproved == nil || disproved.State != v1alpha1.StepFailed || disproved.Reason != v1alpha1.ReasonWorkloadRunningAfterFence {
			t.Errorf("the Executor's fence was not disproved by the workload running again: %+v", disproved)
		} else {
			t.Logf("VerifyFenced (executor): %s", disproved.Message)
		}
		if nf.Status.Method != "ipmi" {
			t.Errorf("fenced by %s, want ipmi after the Executor's fence failed", nf.Status.Method)
		}
		second, uid := p.s.WaitWriter(t, realscene.PodName(0), p.node, 2*time.Minute)
		waitAttached(t, p.s, "pv-"+realscene.PodName(0), second)
		p.logTimes(t, nf, second, uid)
		if p.m.Running() {
			t.Errorf("%s still runs after its fence by power-off", p.node)
		}
		p.clean(t, true)
	})
	t.Run("kubelet killed: KubeletDown, the Executor through the API server", func(t *testing.T) {
		p := startRealPartition(t, false)
		p.fault = time.Now()
		if err := p.m.KillKubelet(); err != nil { // db-0's container runs on, unsupervised
			t.Fatal(err)
		}
		p.fencedByExecutor(t, "KubeletDown", "through the API server")
		nf := fenceOf(t, p.s, p.node)
		if _, ok := nf.Annotations[v1alpha1.AnnotationExecutorStatus]; !ok {
			t.Error("no answer from the agent on the NodeFence")
		}
		p.orderNotCarriedOutAgain(t)
	})
	t.Run("node to node cut only: nothing fenced, db-0 writes on", func(t *testing.T) {
		p := startRealPartition(t, false)
		var others []*netns.Node
		for _, m := range p.peers {
			others = append(others, m.Net())
		}
		if err := p.m.Net().CutNodes(others...); err != nil {
			t.Fatal(err)
		}
		time.Sleep(realPartitionLease + 5*time.Second) // past the Lease timeout, many heartbeat intervals
		if last := p.s.Store.LastAppend(realscene.PodName(0)); time.Since(last) > 2*time.Second {
			t.Errorf("db-0's last write was accepted %s ago: it stopped although nothing was fenced", time.Since(last).Round(100*time.Millisecond))
		}
		if node, uid := p.s.WaitWriter(t, realscene.PodName(0), "", time.Second); node != p.node || uid != p.uid {
			t.Errorf("db-0 is %s on %s, was %s on %s: it was replaced although nothing was fenced", uid, node, p.uid, p.node)
		}
		// The cut was real: the machine's peers lost it, and it lost them.
		for _, m := range p.s.Machines {
			if !strings.Contains(m.LogTail(realscene.AgentDaemon, 10000), `"reachable":false`) {
				t.Errorf("the agent of %s never found a peer unreachable: the cut did not take", m.Name())
			}
		}
		if nf := fenceOf(t, p.s, p.node); nf != nil {
			t.Errorf("%s was fenced although only node-to-node links were cut: %s", p.node, nf.Spec.Reason)
		}
		p.noPowerOff(t)
		p.clean(t, false)
		if err := p.m.Net().Heal(); err != nil {
			t.Fatal(err)
		}
	})
}
