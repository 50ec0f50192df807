package fencing

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// bootMidFence is the boot a node rebooted into while its fence was under way.
const bootMidFence = "boot-mid"

// A node that rebooted while its Executor fence was under way (boot bootAtFence when it began,
// bootMidFence when the agent carried the order out and the fence was confirmed) has not
// rebooted since the fence acted when it is back in bootMidFence: held as BootIDUnchanged, not
// unfenced as Rebooted. The Node, the agent's heartbeat or the executor's answer may say the
// new boot at the confirmation (a kubelet down does not post; a new leader has heard no
// heartbeat yet). Back in a third boot, its agent heartbeating from it, it is unfenced.
func TestRebootedWhileFenced(t *testing.T) {
	for _, tc := range []struct {
		name string
		// seen makes the world show bootMidFence during the fence, before its confirmation.
		seen func(t *testing.T, w *world)
		// answer is the boot ID the executor's answer carries.
		answer string
	}{
		{"the Node says the new boot", func(t *testing.T, w *world) {
			w.setNode(t, func(n *corev1.Node) { n.Status.NodeInfo.BootID = bootMidFence; notReady(n) })
		}, ""},
		{"the agent's heartbeat says the new boot", func(t *testing.T, w *world) {
			w.r.Heartbeats = heartbeats{"n1": {Node: "n1", BootID: bootMidFence, Received: w.now, Sent: w.now, RunningContainers: ptr.To(0)}}
		}, ""},
		{"the executor's answer says the new boot", func(*testing.T, *world) {}, bootMidFence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, "executor")
			w.setNode(t, back(bootAtFence))
			// The agent carries the order out only once the node rebooted.
			w.agent.SetStatus(&providers.Status{State: providers.InProgress, Reason: providers.ReasonOrderRunning})
			w.tick = func(nf *v1alpha1.NodeFence) {
				if len(nf.Status.Steps) > 0 {
					tc.seen(t, w)
					w.agent.SetStatus(&providers.Status{State: providers.Confirmed, BootID: tc.answer})
				}
			}
			if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased || nf.Status.BootID != bootAtFence {
				t.Fatalf("fence ended %s with boot ID %q, want Released with %q:\n%s", nf.Status.Phase, nf.Status.BootID, bootAtFence, goldenTrace(nf))
			}
			w.tick = nil
			w.setNode(t, back(bootMidFence))
			if nf, _ := w.reconcile(t); !slices.Equal(nf.Status.ConfirmedBootIDs, []string{bootMidFence}) {
				t.Errorf("status.confirmedBootIDs %q, want [%s]", nf.Status.ConfirmedBootIDs, bootMidFence)
			}
			nf, node := w.reconcile(t)
			wantHeld(t, nf, node, ReasonBootIDUnchanged)
			w.setNode(t, back(bootAfter))
			w.r.Heartbeats = heartbeats{"n1": {Node: "n1", BootID: bootAfter, Received: w.now, Sent: w.now}}
			nf, node = w.reconcile(t)
			wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
		})
	}
}

// A fence that kept its machine on (the Executor) and heard the node's agent takes a new boot
// ID from the kubelet for a reboot only once the agent heartbeats from that boot too: stolen
// kubelet credentials can post any boot ID and Ready. The agent still in the fence's boot, in
// yet another boot, or not heard by this controller (a new leader) holds the node; a fence
// that never heard an agent, or that confirmed its machine off, needs no agent.
func TestRebootProvenByTheAgentToo(t *testing.T) {
	hb := func(w *world, boot string) heartbeats {
		return heartbeats{"n1": {Node: "n1", BootID: boot, Received: w.now, Sent: w.now, RunningContainers: ptr.To(0)}}
	}
	t.Run("executor", func(t *testing.T) {
		w := newWorld(t, "executor")
		w.setNode(t, back(bootAtFence))
		w.r.Heartbeats = hb(w, bootAtFence)
		w.tick = func(*v1alpha1.NodeFence) { w.r.Heartbeats = hb(w, bootAtFence) } // the agent beats on
		if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased || nf.Status.AgentBootID != bootAtFence {
			t.Fatalf("fence ended %s with status.agentBootID %q, want Released with %q:\n%s", nf.Status.Phase, nf.Status.AgentBootID, bootAtFence, goldenTrace(nf))
		}
		w.tick = nil
		w.setNode(t, back(bootAfter)) // the kubelet's word
		for _, agent := range []struct {
			beats heartbeats
			says  string
		}{
			{hb(w, bootAtFence), "still heartbeats from boot ID " + bootAtFence},
			{heartbeats{}, "holds no heartbeat of its agent"},
			{hb(w, "boot-other"), "heartbeats from another boot ID, boot-other"},
			{hb(w, ""), "holds no heartbeat of its agent that carries a boot ID"},
		} {
			w.r.Heartbeats = agent.beats
			res, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != retryAgentBoot {
				t.Errorf("requeued after %s, want %s: heartbeats wake no reconcile", res.RequeueAfter, retryAgentBoot)
			}
			nf, node := w.reconcile(t)
			wantHeld(t, nf, node, ReasonRebootUnconfirmed)
			if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); !strings.Contains(c.Message, agent.says) || !strings.Contains(c.Message, v1alpha1.AnnotationUnfenceRequest) {
				t.Errorf("condition message %q: want it to say %q and how to confirm the node clean", c.Message, agent.says)
			}
		}
		w.r.Heartbeats = hb(w, bootAfter)
		nf, node := w.reconcile(t)
		wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
	})
	t.Run("executor, no agent heard", func(t *testing.T) {
		w := newWorld(t, "executor")
		w.setNode(t, back(bootAtFence))
		if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased || nf.Status.AgentBootID != "" {
			t.Fatalf("fence ended %s with status.agentBootID %q, want Released with none", nf.Status.Phase, nf.Status.AgentBootID)
		}
		w.setNode(t, back(bootAfter))
		nf, node := w.reconcile(t)
		wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
	})
	// The agent heard when the fence began only: the machine went down with it (a power-off
	// needs no agent), or it was cut off from everything and fenced itself (a self-fence
	// keeps the machine on until its watchdog resets it).
	for _, method := range []string{"ipmi", "self-fence"} {
		t.Run(method+", agent heard when the fence began only", func(t *testing.T) {
			w := newWorld(t, method)
			w.setNode(t, back(bootAtFence))
			w.r.Heartbeats = hb(w, bootAtFence)
			w.tick = func(nf *v1alpha1.NodeFence) {
				if len(nf.Status.Steps) > 0 {
					w.r.Heartbeats = heartbeats{}
				}
			}
			w.setNode(t, notReady)
			if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased || nf.Status.AgentBootID != bootAtFence {
				t.Fatalf("fence ended %s with status.agentBootID %q, want Released with %q:\n%s", nf.Status.Phase, nf.Status.AgentBootID, bootAtFence, goldenTrace(nf))
			}
			w.tick = nil
			w.setNode(t, back(bootAfter))
			nf, node := w.reconcile(t)
			if method == "ipmi" {
				wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
				return
			}
			wantHeld(t, nf, node, ReasonRebootUnconfirmed)
			w.r.Heartbeats = hb(w, bootAfter)
			nf, node = w.reconcile(t)
			wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
		})
	}
}

// A power fence's node seen in a new boot at the confirmation (it rebooted while the fence was
// under way) that posts its status in that boot after the power-off never lost power:
// PowerOffDisproved, not Rebooted.
func TestPowerOffDisprovedInTheBootOfTheConfirmation(t *testing.T) {
	w := newWorld(t, "ipmi")
	w.setNode(t, back(bootAtFence))
	w.power.SetStatus(&providers.Status{State: providers.InProgress, Reason: "PowerStillOn"})
	w.tick = func(nf *v1alpha1.NodeFence) {
		if len(nf.Status.Steps) > 0 {
			w.setNode(t, func(n *corev1.Node) { n.Status.NodeInfo.BootID = bootMidFence; notReady(n) })
			w.power.SetStatus(nil)
		}
	}
	if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("fence ended %s, want Released", nf.Status.Phase)
	}
	w.tick = nil
	nf, _ := w.reconcile(t)
	w.setNode(t, func(n *corev1.Node) {
		back(bootMidFence)(n)
		n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(nf.Status.FencedTime.Add(time.Minute))
	})
	nf, node := w.reconcile(t)
	wantHeld(t, nf, node, ReasonPowerOffDisproved)
}

// A confirmation whose Node read fails waits (the boot ID is recorded with it), but not past the
// method's time and bootReadGrace: then the method fails, and the chain goes on, rather than
// wait for ever.
func TestConfirmationWaitsForTheBootIDWithinTheMethodsTime(t *testing.T) {
	w := newWorld(t, "executor")
	w.setNode(t, back(bootAtFence))
	// The agent confirms only once the fence has begun (its first look reads the Node too); the
	// Node's reads fail from then on.
	w.agent.SetStatus(&providers.Status{State: providers.InProgress, Reason: providers.ReasonOrderRunning})
	failing := false
	w.tick = func(nf *v1alpha1.NodeFence) {
		if failing = len(nf.Status.Steps) > 0; failing {
			w.agent.SetStatus(&providers.Status{State: providers.Confirmed})
		}
	}
	w.reconcileErrors = true
	w.r.APIReader = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Node); ok && failing {
				return apierrors.NewServiceUnavailable("the API server is overloaded")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	w.ticks = 30 // the executor's 5 s, and less than bootReadGrace more
	nf, _ := w.advance(t)
	if s := stepOf(nf, v1alpha1.StepConfirmTerminated); s.State != v1alpha1.StepStarted {
		t.Fatalf("ConfirmTerminated %s %q within %s of the method's timeout, want it waiting\n%s", s.State, s.Message, bootReadGrace, goldenTrace(nf))
	}
	w.ticks = 10
	nf, _ = w.advance(t)
	s := stepOf(nf, v1alpha1.StepConfirmTerminated)
	if s.State != v1alpha1.StepFailed || !strings.Contains(s.Message, "ran out before the node's boot ID could be read") {
		t.Errorf("ConfirmTerminated %s %q: want the method failed once its time ran out\n%s", s.State, s.Message, goldenTrace(nf))
	}
	checkReleased(t, w, false)
}

// A kubelet whose clock runs minutes behind stamps its heartbeat before a fence's confirmation;
// the API server's time of its status write (its managedFields entry) shows it posted after.
// Another manager's write (node lifecycle marking it NotReady) is no post of the kubelet's.
func TestReadyPostedAfterByTheAPIServersClock(t *testing.T) {
	confirmed := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	owns := func(fields string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(fields)} }
	node := func(manager, sub string, wrote time.Duration, fields *metav1.FieldsV1) *corev1.Node {
		n := &corev1.Node{}
		back(bootAtFence)(n)
		n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(confirmed.Add(-10 * time.Minute)) // the kubelet's clock
		at := metav1.NewTime(confirmed.Add(wrote))
		n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: sub, Time: &at, FieldsV1: fields}}
		return n
	}
	for _, tc := range []struct {
		name         string
		manager, sub string
		wrote        time.Duration
		fields       *metav1.FieldsV1
		posted       bool
	}{
		{"the kubelet wrote its status 2 min after", "kubelet", "status", 2 * time.Minute, nil, true},
		{"the kubelet wrote its status 10 s after (within the margin)", "kubelet", "status", 10 * time.Second, nil, false},
		{"node lifecycle wrote 2 min after", "kube-controller-manager", "status", 2 * time.Minute, owns(`{"f:status":{"f:conditions":{}}}`), false},
		{"the kubelet wrote the Node itself 2 min after", "kubelet", "", 2 * time.Minute, nil, false},
		{"k3s's kubelet (manager k3s, owning nodeInfo) wrote its status 2 min after", "k3s", "status", 2 * time.Minute, owns(`{"f:status":{"f:nodeInfo":{"f:bootID":{}}}}`), true},
	} {
		if _, posted := readyPostedAfter(node(tc.manager, tc.sub, tc.wrote, tc.fields), &confirmed); posted != tc.posted {
			t.Errorf("%s: posted after = %t, want %t", tc.name, posted, tc.posted)
		}
	}
}
