package demo

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/realscene"
	"palisade.dev/palisade/test/scenario"
)

// demoLease is the policy's Lease timeout: the agents' silence finds a dead machine long
// before it.
const demoLease = 20 * time.Second

// TestDemo is `make demo`: three real machines, db-0 of a StatefulSet writing to the witness
// store from its RWO volume, and the power of db-0's machine cut. It prints the timeline of
// Palisade fencing the machine and moving db-0, and fails unless the fence was confirmed
// before the first release and the witness store saw at most one copy of db-0 at a time.
func TestDemo(t *testing.T) {
	began := time.Now()
	say := func(format string, args ...any) {
		t.Logf("[%6.1fs] %s", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx := context.Background()
	say("starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler, and three real machines: " +
		"each a PID and network namespace with its own containerd, a real kubelet, a palisade-agent and a CSI node plugin, " +
		"and an ipmi_sim BMC outside whose power-off kills everything in it")
	s := realscene.Start(t, realscene.Options{Machines: 3, Agents: true, Volumes: true})
	s.CreatePolicy(t, demoLease, realscene.ExecutorFirst)
	ctrls := s.StartControllers(t, 2)
	realscene.WaitLeader(t, ctrls, time.Minute)
	say("palisade-controller running, 2 replicas with leader election; FencingPolicy %q: the Executor for reachable nodes, then IPMI power-off; Lease timeout %s",
		scenario.PolicyName, demoLease)
	s.DeployWitness(t, 1)
	first, uid := s.WaitWriter(t, realscene.PodName(0), "", time.Minute)
	say("StatefulSet %s: %s Running on %s, writing to the witness store every 100 ms from its RWO volume pv-%s",
		realscene.StatefulSetName, realscene.PodName(0), first, realscene.PodName(0))
	s.WaitAgents(t, time.Minute)
	say("every palisade-agent heard by the leader (heartbeats every %s) and probing its peers", realscene.AgentInterval)
	time.Sleep(3 * time.Second) // a history of db-0 writing before the cut

	pod := &corev1.Pod{}
	if err := s.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: realscene.PodName(0)}, pod); err != nil || string(pod.UID) != uid {
		t.Fatalf("reading %s: %v (UID %s, writing %s)", realscene.PodName(0), err, pod.UID, uid)
	}
	bmc := s.BMC(first)
	tg := scenario.Target{Cluster: s.Cluster, Node: first, PoweredOn: bmc.PoweredOn,
		Wrote: func(uid string) bool { _, ok := s.Store.FirstAppend(uid); return ok }}
	say("cutting the power of %s through its BMC at %s: its kubelet, its agent and %s's container die at once", first, bmc.Address(), realscene.PodName(0))
	tr, err := scenario.Track(ctx, tg, pod, func(m scenario.Milestone, d time.Duration) {
		t.Logf("            +%5.1fs  %s", d.Seconds(), m)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	cut := time.Now()
	if err := bmc.SetPower(false); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Wait(ctx, scenario.ReplacementWrites, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Wait(ctx, scenario.AttachmentReleased, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	second, _ := s.WaitWriter(t, realscene.PodName(0), first, 10*time.Second)
	say("%s writes again, from %s", realscene.PodName(0), second)
	time.Sleep(2 * time.Second) // and of the replacement writing after it

	nf := waitReleased(t, s, first)
	say("NodeFence %s: phase %s, method %s, trigger %s, verdict %s (%s)", nf.Name, nf.Status.Phase, nf.Status.Method, nf.Spec.Trigger, nf.Spec.Verdict, nf.Spec.Reason)
	for _, st := range nf.Status.Steps {
		say("  %-18s %-9s %s", st.Name, st.State, st.Message)
	}
	if ok, what := tr.ConfirmedBeforeRelease(); !ok {
		t.Fatalf("the first release (%s) was not preceded by a confirmed fence with the power Off", what)
	}
	say("the confirmation was written before the first release (etcd revisions compared), and the BMC read Off at that release")
	h, evs := s.History(t), s.Audit(t)
	v := append(checker.OneCopy(h, 0), checker.NoEarlyRelease(evs, []string{realscene.ControllerUser})...)
	v = append(v, checker.NoHealthyFenced(evs, map[string]time.Time{first: cut}, nil)...)
	if len(v) > 0 {
		t.Fatalf("%s", checker.Report(v))
	}
	say("the witness store's %d writes show at most one copy of %s at any moment; the API server's audit (%d writes) shows no release before the confirmed fence",
		len(h), realscene.PodName(0), len(evs))
}

// waitReleased waits for the node's NodeFence to be Released.
func waitReleased(t *testing.T, s *realscene.Scene, node string) *v1alpha1.NodeFence {
	t.Helper()
	nf := &v1alpha1.NodeFence{}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := s.Cluster.Client.Get(ctx, client.ObjectKey{Name: node}, nf)
		return err == nil && nf.Status.Phase == v1alpha1.PhaseReleased, client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("waiting for NodeFence %s to be Released (phase %s): %v", node, nf.Status.Phase, err)
	}
	return nf
}
