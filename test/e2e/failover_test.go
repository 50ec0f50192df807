package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

var fullTrace = []string{
	"PowerOff:Succeeded", "ConfirmOff:Succeeded", "VerifyFenced:Succeeded", "Taint:Succeeded", "DeletePods:Succeeded", "ReleaseAttachments:Succeeded",
}

// Power loss on node 1: detected, powered off and confirmed through its real BMC, tainted, the
// pod force-deleted, the attachment released, and the StatefulSet's replacement Running on
// another node — and nothing released before the fence was confirmed.
func TestPowerLossFailover(t *testing.T) {
	env := startScene(t, scenario.Options{})
	startController(t, env)
	w := deploy(t, env)
	ctx := context.Background()

	n1 := env.Node(1)
	tr, err := env.Track(ctx, n1, w.Pod, func(m scenario.Milestone, d time.Duration) { t.Logf("+%5.1fs %s", d.Seconds(), m) })
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	if err := n1.BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Wait(ctx, scenario.ReplacementRunning, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, first := tr.ConfirmedBeforeRelease(); !ok {
		t.Errorf("the first release (%s) was not preceded by a confirmed fence with the power Off", first)
	}
	nf := waitFence(t, env.Cluster, n1.Name(), 30*time.Second, phaseIs(v1alpha1.PhaseReleased))
	if diff := cmp.Diff(fullTrace, trace(nf)); diff != "" {
		t.Errorf("step trace (-want +got):\n%s", diff)
	}
	if st, reason, _ := condition(nf, v1alpha1.ConditionFenced); st != "True" || reason != "PowerOffConfirmed" {
		t.Errorf("Fenced condition = %s/%s, want True/PowerOffConfirmed", st, reason)
	}
	// The attachment goes either way: deleted by Palisade, or detached first by the
	// attach-detach controller once the taint is on and the pod gone.
	if nf.Spec.Trigger != v1alpha1.TriggerDetected || nf.Status.PodsDeleted != 1 || nf.Status.AttachmentsReleased > 1 {
		t.Errorf("trigger %s, pods deleted %d, attachments released %d; want Detected, 1, at most 1", nf.Spec.Trigger, nf.Status.PodsDeleted, nf.Status.AttachmentsReleased)
	}
	if vas, err := env.Attachments(ctx, n1.Name()); err != nil || len(vas) != 0 {
		t.Errorf("%d attachments left on %s (err %v)", len(vas), n1.Name(), err)
	}
	pod, err := env.WaitPodRunning(ctx, "", n1.Name(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !hasEvent(eventsFor(t, env, "Node", n1.Name()), "FenceConfirmed") {
		t.Error("no FenceConfirmed event on the node")
	}
	t.Logf("replacement %s Running on %s", pod.Name, pod.Spec.NodeName)
}

// A controller killed between two steps leaves a record a new controller resumes from,
// taking the interrupted step again and skipping none.
func TestControllerKilledResumes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		killAt    v1alpha1.StepName // killed once this step is recorded as Started, before it is taken
		wantTaint bool              // whether the taint is on the node at the kill
	}{
		{"between power-off and its confirmation", v1alpha1.StepConfirmOff, false},
		{"while watching the node for signs of life", v1alpha1.StepVerifyFenced, false},
		{"between power-off and taint", v1alpha1.StepTaint, false},
		{"between taint and pod deletion", v1alpha1.StepDeletePods, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startScene(t, scenario.Options{})
			killed := make(chan struct{})
			err := env.StartController(context.Background(), func(o *app.Options) {
				o.NewClient = killAfterRecording(tc.killAt, killed)
			})
			if err != nil {
				t.Fatal(err)
			}
			w := deploy(t, env)
			n1 := env.Node(1)
			if err := n1.BMC.SetPower(false); err != nil {
				t.Fatal(err)
			}
			select {
			case <-killed:
			case <-time.After(time.Minute):
				t.Fatal("the controller never reached the step to be killed at")
			}
			if err := env.StopController(); err != nil {
				t.Fatal(err)
			}
			assertKilledState(t, env, w, tc.killAt, tc.wantTaint)

			startController(t, env)
			nf := waitFence(t, env.Cluster, n1.Name(), time.Minute, phaseIs(v1alpha1.PhaseReleased))
			if diff := cmp.Diff(fullTrace, trace(nf)); diff != "" {
				t.Errorf("step trace after resuming (-want +got):\n%s", diff)
			}
			for _, s := range nf.Status.Steps {
				if s.Name == tc.killAt && s.Attempts < 1 {
					t.Errorf("step %s was not taken after the restart (attempts %d)", s.Name, s.Attempts)
				}
			}
			if _, err := env.WaitPodRunning(context.Background(), "", n1.Name(), time.Minute); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// killAfterRecording builds the controller's client so that the NodeFence status write
// recording killAt as a new Started step goes through, then closes killed and blocks the
// reconcile until the controller stops: the controller dies between recording the step and
// taking it.
func killAfterRecording(killAt v1alpha1.StepName, killed chan<- struct{}) client.NewClientFunc {
	return func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(cfg, opts)
		if err != nil {
			return nil, err
		}
		var once sync.Once
		return interceptor.NewClient(c, interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if err := c.SubResource(sub).Update(ctx, obj, opts...); err != nil {
					return err
				}
				nf, ok := obj.(*v1alpha1.NodeFence)
				if !ok || len(nf.Status.Steps) == 0 {
					return nil
				}
				s := nf.Status.Steps[len(nf.Status.Steps)-1]
				if s.Name != killAt || s.State != v1alpha1.StepStarted || s.Attempts != 0 {
					return nil
				}
				once.Do(func() { close(killed) })
				<-ctx.Done()
				return ctx.Err()
			},
		}), nil
	}
}

func assertKilledState(t *testing.T, env *scenario.Env, w *scenario.Workload, killAt v1alpha1.StepName, wantTaint bool) {
	t.Helper()
	ctx := context.Background()
	nf := &v1alpha1.NodeFence{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: w.Pod.Spec.NodeName}, nf); err != nil {
		t.Fatal(err)
	}
	last := nf.Status.Steps[len(nf.Status.Steps)-1]
	if last.Name != killAt || last.State != v1alpha1.StepStarted || last.Attempts != 0 {
		t.Fatalf("record at the kill: last step %s %s (attempts %d), want %s Started, not taken", last.Name, last.State, last.Attempts, killAt)
	}
	node := &corev1.Node{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: w.Pod.Spec.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	tainted := false
	for _, taint := range node.Spec.Taints {
		tainted = tainted || taint.Key == v1alpha1.TaintOutOfService
	}
	if tainted != wantTaint {
		t.Errorf("taint present at the kill = %t, want %t", tainted, wantTaint)
	}
	pod := &corev1.Pod{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(w.Pod), pod); err != nil || pod.UID != w.Pod.UID {
		t.Errorf("the pod was deleted before the DeletePods step was taken (err %v)", err)
	}
}

// A node whose heartbeats stop for less than the lease timeout and come back is never fenced.
func TestHeartbeatsReturnBeforeDecision(t *testing.T) {
	env := startScene(t, scenario.Options{LeaseTimeout: 8 * time.Second})
	startController(t, env)
	n2 := env.Node(2)
	n2.PauseHeartbeats()
	time.Sleep(5 * time.Second)
	n2.ResumeHeartbeats()
	time.Sleep(12 * time.Second) // past the timeout counted from the pause

	err := env.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: n2.Name()}, &v1alpha1.NodeFence{})
	if client.IgnoreNotFound(err) != nil || err == nil {
		t.Errorf("a NodeFence exists for %s (err %v), want none", n2.Name(), err)
	}
	if on, err := n2.BMC.PoweredOn(); err != nil || !on {
		t.Errorf("node %s power on = %t (err %v), want on", n2.Name(), on, err)
	}
	if offs, err := n2.BMC.OffCommands(); err != nil || offs != 0 {
		t.Errorf("%d power-off commands reached the BMC (err %v), want 0", offs, err)
	}
}

// Invariant 3: when more nodes look failed than the storm guard allows, nothing is fenced and
// the policy says so.
func TestStormGuardFencesNothing(t *testing.T) {
	env := startScene(t, scenario.Options{})
	startController(t, env)
	for _, i := range []int{2, 3} {
		if err := env.Node(i).BMC.SetPower(false); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	time.Sleep(leaseTimeout + 8*time.Second)
	var fences v1alpha1.NodeFenceList
	if err := env.Cluster.Client.List(ctx, &fences); err != nil {
		t.Fatal(err)
	}
	if len(fences.Items) != 0 {
		t.Errorf("%d NodeFences created while 2 of 3 nodes look failed; want none", len(fences.Items))
	}
	p := &v1alpha1.FencingPolicy{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: scenario.PolicyName}, p); err != nil {
		t.Fatal(err)
	}
	active := false
	for _, c := range p.Status.Conditions {
		active = active || (c.Type == v1alpha1.ConditionStormGuardActive && c.Status == "True")
	}
	if !active || p.Status.UnhealthyNodes != 2 {
		t.Errorf("policy status: StormGuardActive=%t unhealthy=%d, want true and 2: %+v", active, p.Status.UnhealthyNodes, p.Status)
	}
	if l := p.Status.Unhealthy; len(l) != 2 || l[0].Node != "node-2" || l[1].Node != "node-3" || l[0].Verdict != "Dead" || !strings.Contains(l[0].Reason, "not renewed") {
		t.Errorf("policy status lists the unhealthy nodes as %+v; want node-2 and node-3, Dead, with the Lease's reason", l)
	}
	if !hasEvent(eventsFor(t, env, "Node", env.Node(2).Name()), "StormGuardActive") {
		t.Error("no StormGuardActive event on the held-back node")
	}
}
