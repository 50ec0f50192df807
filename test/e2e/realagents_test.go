package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/realscene"
)

// Real palisade-agents on real machines, heartbeating over mTLS to the leading controller and
// probing each other: the controller marks each node as running an agent (palisade.dev/agent);
// an agent that crashes alone fences nothing, and its mark stays; when the leader dies the
// agents' heartbeats follow the new one; and a machine's power loss is found by its agent's
// silence and its peers' reports, long before its Lease expires (a 30 s Lease timeout here),
// then fenced and released with at most one copy of db-0 writing.
func TestRealMachinesWithAgents(t *testing.T) {
	const leaseTimeout = 30 * time.Second
	s := realscene.Start(t, realscene.Options{Machines: 3, Agents: true, Volumes: true})
	s.CreatePolicy(t, leaseTimeout)
	ctrls := s.StartControllers(t, 2)
	s.DeployWitness(t, 1)
	s.WaitAgents(t, time.Minute)
	first, _ := s.WaitWriter(t, realscene.PodName(0), "", time.Minute)
	other := realscene.NodeName(1)
	if other == first {
		other = realscene.NodeName(2)
	}

	for _, m := range s.Machines {
		waitMarked(t, s, m.Name(), true, 30*time.Second)
	}

	// The agent of a healthy machine crashes: its kubelet still renews the Lease, so nothing is
	// fenced, and its node stays marked.
	om := s.Machine(other)
	if err := om.KillDaemon(realscene.AgentDaemon); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second) // ten missed heartbeats
	if nf := fenceOf(t, s, other); nf != nil {
		t.Fatalf("the agent of healthy %s crashed and %s was fenced: %s", other, other, nf.Status.Phase)
	}
	waitMarked(t, s, other, true, 0)
	if err := om.StartDaemon(realscene.AgentDaemon); err != nil {
		t.Fatal(err)
	}
	waitAgentLog(t, s, other, "heartbeats accepted by the controller", 2, time.Minute)

	// The leader dies: the heartbeat relay follows the new leader, and every agent is heard again.
	before := map[string]int{}
	for _, m := range s.Machines {
		before[m.Name()] = strings.Count(m.LogTail(realscene.AgentDaemon, 10000), "heartbeats accepted by the controller")
	}
	leader := realscene.WaitLeader(t, ctrls, time.Minute)
	leader.Kill()
	realscene.WaitLeader(t, ctrls, time.Minute)
	for _, m := range s.Machines {
		waitAgentLog(t, s, m.Name(), "heartbeats accepted by the controller", before[m.Name()]+1, time.Minute)
	}

	// Power loss under db-0: the agents find it before the Lease could.
	cut := time.Now()
	if err := s.BMC(first).SetPower(false); err != nil {
		t.Fatal(err)
	}
	var fenced time.Duration
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*leaseTimeout, true, func(context.Context) (bool, error) {
		fenced = time.Since(cut)
		return fenceOf(t, s, first) != nil, nil
	})
	if err != nil {
		t.Fatalf("%s lost its power and no NodeFence came in %s", first, 2*leaseTimeout)
	}
	second, _ := s.WaitWriter(t, realscene.PodName(0), first, 2*time.Minute)
	t.Logf("power loss of %s: NodeFence after %s, db-0 writes from %s %s after the cut",
		first, fenced.Round(100*time.Millisecond), second, time.Since(cut).Round(100*time.Millisecond))
	if fenced >= leaseTimeout/2 {
		t.Errorf("the fence came %s after the power loss: the agents' silence should be seen well within the %s Lease timeout", fenced, leaseTimeout)
	}
	waitAttached(t, s, "pv-"+realscene.PodName(0), second)
	h, evs := s.History(t), s.Audit(t)
	v := append(checker.OneCopy(h, 0), checker.NoEarlyRelease(evs, []string{realscene.ControllerUser})...)
	v = append(v, checker.NoHealthyFenced(evs, map[string]time.Time{first: cut}, nil)...)
	if len(v) > 0 {
		t.Errorf("%s", checker.Report(v))
	}
}

// waitAttached waits until the volume is attached to node, and to no other.
func waitAttached(t *testing.T, s *realscene.Scene, pv, node string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var list storagev1.VolumeAttachmentList
		if err := s.Cluster.Client.List(ctx, &list); err != nil {
			return false, nil
		}
		seen = nil
		ok := false
		for _, va := range list.Items {
			if va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != pv {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s attached=%t", va.Spec.NodeName, va.Status.Attached))
			ok = va.Spec.NodeName == node && va.Status.Attached
		}
		return ok && len(seen) == 1, nil
	})
	if err != nil {
		t.Fatalf("volume %s not attached to %s alone: %v", pv, node, seen)
	}
}

// waitMarked waits until the node is marked as running an agent (v1alpha1.AnnotationAgent), or
// unmarked, within timeout (0: it must be so now).
func waitMarked(t *testing.T, s *realscene.Scene, node string, marked bool, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	is := func(context.Context) (bool, error) {
		var n corev1.Node
		if err := s.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: node}, &n); err != nil {
			return false, err
		}
		_, ok := n.Annotations[v1alpha1.AnnotationAgent]
		return ok == marked, nil
	}
	var err error
	if timeout > 0 {
		err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, is)
	} else if ok, gerr := is(context.Background()); !ok {
		err = cmp.Or(gerr, errors.New("not so now"))
	}
	if err != nil {
		t.Fatalf("node %s marked %s: %v, want %v within %s (%v)", node, v1alpha1.AnnotationAgent, !marked, marked, timeout, err)
	}
	t.Logf("node %s marked %s: %v after %s", node, v1alpha1.AnnotationAgent, marked, time.Since(start).Round(100*time.Millisecond))
}

// waitAgentLog waits until the node's agent has logged text at least n times.
func waitAgentLog(t *testing.T, s *realscene.Scene, node, text string, n int, timeout time.Duration) {
	t.Helper()
	m := s.Machine(node)
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return strings.Count(m.LogTail(realscene.AgentDaemon, 10000), text) >= n, nil
	})
	if err != nil {
		t.Fatalf("the agent of %s did not log %q %d times within %s:\n%s", node, text, n, timeout, m.LogTail(realscene.AgentDaemon, 20))
	}
}

// fenceOf is the node's NodeFence, nil when none.
func fenceOf(t *testing.T, s *realscene.Scene, node string) *v1alpha1.NodeFence {
	t.Helper()
	var list v1alpha1.NodeFenceList
	if err := s.Cluster.Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == node {
			return &list.Items[i]
		}
	}
	return nil
}
