package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/realscene"
)

// Recovery on real machines (invariant 5), under a policy that powers fenced machines back on:
//   - A machine fenced by the Executor keeps its power: when its kubelet runs again, the node is
//     Ready with the boot ID it had when fenced, and Palisade keeps it fenced (BootIDUnchanged).
//     Power-cycled by hand, it is back with a new boot ID, which its kubelet and its agent both
//     report, and is unfenced (Rebooted).
//   - A machine that lost its power is fenced by IPMI, released, powered back on by Palisade,
//     boots with a new boot ID, and is unfenced (Rebooted).
//   - The same machine losing its power again within the flap window is fenced, powered on and
//     back rebooted, and held fenced (Flapping) until an operator confirms it clean (recovered
//     ConfirmedClean: Flapping holds a rebooted node, so the fence that follows records that
//     recovery).
//
// The witness store sees at most one copy of db-0 throughout, and nothing is released before a
// confirmed fence.
func TestRealMachinesRecovery(t *testing.T) {
	s := realscene.Start(t, realscene.Options{Machines: 3, Agents: true})
	s.CreatePolicy(t, 20*time.Second, realscene.ExecutorFirst, func(p *v1alpha1.FencingPolicy) { p.Spec.Recovery.PowerOn = true })
	s.StartControllers(t, 2)
	s.DeployWitness(t, 1)
	s.WaitAgents(t, time.Minute)
	x, _ := s.WaitWriter(t, realscene.PodName(0), "", time.Minute)
	bootX := s.Machine(x).BootID()

	// The Executor fences x on request: its workload and its kubelet stop, its power stays on.
	annotateNode(t, s, x, map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: recovery"})
	nf := waitFence(t, s.Cluster, x, 3*time.Minute, fenceEnded)
	if nf.Status.Phase != v1alpha1.PhaseReleased || nf.Status.Method != "executor" || nf.Status.BootID != bootX {
		t.Fatalf("fence of %s: %s by %s, boot ID %q; want Released by the executor with boot ID %s", x, nf.Status.Phase, nf.Status.Method, nf.Status.BootID, bootX)
	}
	y, _ := s.WaitWriter(t, realscene.PodName(0), x, 2*time.Minute)
	started := time.Now()
	if err := s.Machine(x).StartKubelet(); err != nil {
		t.Fatal(err)
	}
	// The Ready the kubelet posted before it was stopped may still stand: the restarted one
	// posts NotReady first (its PLEG not yet healthy), which would end the hold a moment after
	// it was judged on the old Ready. Wait for a Ready posted since the start.
	s.WaitReadySince(t, x, started, 2*time.Minute)
	nf = waitHeld(t, s, x, "BootIDUnchanged")
	assertTainted(t, s, x, true)

	// Someone takes the taint off by hand: said, on the fence and the node; x is still held.
	untaintNode(t, s, x)
	waitHeld(t, s, x, "TaintRemoved")
	wantNodeEvent(t, s, x, "TaintRemoved")

	// Someone power-cycles x by hand: it is back with a new boot ID, which its kubelet reports
	// and its agent heartbeats too. The fence heard the agent (status.agentBootID) and kept the
	// machine on, so it takes the reboot as proven only from both. This shows the real kubelet
	// and the real agent agree on the boot, so that the rule holds no real recovery; the hold
	// itself (RebootUnconfirmed) is TestRebootProvenByTheAgentToo's.
	if nf.Status.AgentBootID != bootX {
		t.Errorf("fence of %s: status.agentBootID %q, want its agent's boot when fenced, %s", x, nf.Status.AgentBootID, bootX)
	}
	if err := s.BMC(x).SetPower(false); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); s.Machine(x).Running(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("machine %s still runs a minute after its power was cut", x)
		}
	}
	if err := s.BMC(x).SetPower(true); err != nil {
		t.Fatal(err)
	}
	nf = waitFence(t, s.Cluster, x, 3*time.Minute, func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseRecovered })
	if r := nf.Status.Recovery; r == nil || r.How != v1alpha1.RecoveryRebooted || r.BootID == bootX || r.BootID != s.Machine(x).BootID() {
		t.Errorf("recovery of %s: %+v; want Rebooted with the new boot ID %s (was %s)", x, nf.Status.Recovery, s.Machine(x).BootID(), bootX)
	}
	assertTainted(t, s, x, false)

	// y loses its power: fenced by IPMI, powered on by Palisade, back with a new boot ID.
	bootY := s.Machine(y).BootID()
	if err := s.BMC(y).SetPower(false); err != nil {
		t.Fatal(err)
	}
	nf = waitFence(t, s.Cluster, y, 2*time.Minute, func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseRecovered })
	if r := nf.Status.Recovery; r == nil || r.How != v1alpha1.RecoveryRebooted || r.BootID == bootY || r.BootID != s.Machine(y).BootID() {
		t.Errorf("recovery of %s: %+v; want Rebooted with the new boot ID %s (was %s)", y, nf.Status.Recovery, s.Machine(y).BootID(), bootY)
	}
	if nf.Status.PowerRestoredTime == nil || nf.Status.Method != "ipmi" {
		t.Errorf("fence of %s: method %s, powered on %v; want ipmi and a power-on", y, nf.Status.Method, nf.Status.PowerRestoredTime)
	}
	assertTainted(t, s, y, false)
	recoveredAt := nf.Status.Recovery.RecoveredTime

	// y loses its power again within the flap window: held fenced although it rebooted.
	if err := s.BMC(y).SetPower(false); err != nil {
		t.Fatal(err)
	}
	nf = waitHeld(t, s, y, "Flapping")
	if nf.Spec.PreviousRecoveryTime == nil || !nf.Spec.PreviousRecoveryTime.Equal(recoveredAt) {
		t.Errorf("the second fence of %s records the previous recovery at %v, want %v", y, nf.Spec.PreviousRecoveryTime, recoveredAt)
	}
	assertTainted(t, s, y, true)
	// A fence request made while y is held is kept when y is given back: y is fenced again at
	// once, on that request, its fence recording the recovery before it.
	annotateNode(t, s, y, map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: fence it again once back"})
	annotateNode(t, s, y, map[string]any{v1alpha1.AnnotationUnfenceRequest: "e2e: PSU replaced"})
	nf = waitFence(t, s.Cluster, y, 2*time.Minute, func(nf *v1alpha1.NodeFence) bool {
		return nf.Spec.Trigger == v1alpha1.TriggerManual && nf.Spec.Reason == "e2e: fence it again once back" && nf.Status.Phase == v1alpha1.PhaseReleased
	})
	if nf.Spec.PreviousRecoveryTime == nil || nf.Spec.PreviousRecoveryTime.Time.Before(recoveredAt.Time) {
		t.Errorf("the fence on the kept request records the previous recovery at %v, want the one after the flapping hold (after %v)", nf.Spec.PreviousRecoveryTime, recoveredAt)
	}
	wantNodeEvent(t, s, y, "FenceRequestKept")
	assertTainted(t, s, y, true)

	s.WaitWriter(t, realscene.PodName(0), "", 2*time.Minute)
	h, evs := s.History(t), s.Audit(t)
	v := append(checker.OneCopy(h, 0), checker.NoEarlyRelease(evs, []string{realscene.ControllerUser})...)
	if len(v) > 0 {
		t.Errorf("%s", checker.Report(v))
	}
}

// waitHeld waits until the node's NodeFence is Released with Recovered=False for reason, and
// checks that it stays so (the node not unfenced) for 5 s more.
func waitHeld(t *testing.T, s *realscene.Scene, node, reason string) *v1alpha1.NodeFence {
	t.Helper()
	held := func(nf *v1alpha1.NodeFence) bool {
		c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered)
		return nf.Status.Phase == v1alpha1.PhaseReleased && c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason
	}
	waitFence(t, s.Cluster, node, 3*time.Minute, held)
	time.Sleep(5 * time.Second)
	nf := &v1alpha1.NodeFence{}
	if err := s.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: node}, nf); err != nil {
		t.Fatal(err)
	}
	if !held(nf) {
		t.Fatalf("NodeFence %s was held for %s and no longer is: phase %s, conditions %+v", node, reason, nf.Status.Phase, nf.Status.Conditions)
	}
	return nf
}

// assertTainted checks whether the node carries the out-of-service taint.
func assertTainted(t *testing.T, s *realscene.Scene, node string, want bool) {
	t.Helper()
	n := &corev1.Node{}
	if err := s.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	got := false
	for _, taint := range n.Spec.Taints {
		got = got || taint.Key == v1alpha1.TaintOutOfService
	}
	if got != want {
		t.Errorf("node %s carries the out-of-service taint: %v, want %v (taints %v)", node, got, want, n.Spec.Taints)
	}
}

// untaintNode takes the out-of-service taint off the node by hand, as the cluster's admin.
func untaintNode(t *testing.T, s *realscene.Scene, node string) {
	t.Helper()
	n := &corev1.Node{}
	if err := s.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintOutOfService })
	if err := s.Cluster.Client.Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

// wantNodeEvent checks that an event with reason was recorded on the node.
func wantNodeEvent(t *testing.T, s *realscene.Scene, node, reason string) {
	t.Helper()
	if events := clusterEvents(t, s.Cluster, "Node", node); !hasEvent(events, reason) {
		t.Errorf("no %s event on node %s; its events: %v", reason, node, events)
	}
}

// annotateNode merge-patches the node's annotations as the cluster's admin.
func annotateNode(t *testing.T, s *realscene.Scene, node string, annotations map[string]any) {
	t.Helper()
	patch, err := jsonMarshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Cluster.Client.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}
