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

// A fence that kept its machine on and whose node has an agent takes a new boot ID from the
// kubelet for a reboot only once the agent heartbeats from that boot too: stolen kubelet
// credentials can post any boot ID and Ready. The node has an agent when the fence heard it
// (status.agentBootID), an agent method confirmed the fence, or a heartbeat of it is held now.
// The agent still in the fence's boot, in yet another boot, or not heard by this controller
// (a new leader) holds the node; a fence that confirmed the machine off (not disproved since),
// or a node without an agent, needs none.
func TestRebootProvenByTheAgentToo(t *testing.T) {
	hb := func(w *world, boot string) heartbeats {
		return heartbeats{"n1": {Node: "n1", BootID: boot, Received: w.now, Sent: w.now, RunningContainers: ptr.To(0)}}
	}
	// heldUntilTheAgent checks that n1, back in bootAfter as its kubelet says, is held while the
	// agent says otherwise (each of says: what the hold's message names), requeued, and
	// unfenced once the agent heartbeats from bootAfter.
	heldUntilTheAgent := func(t *testing.T, w *world, says ...string) {
		t.Helper()
		w.setNode(t, back(bootAfter))
		beats := map[string]heartbeats{
			"still heartbeats from boot ID " + bootAtFence:           hb(w, bootAtFence),
			"holds no heartbeat of its agent":                        {},
			"heartbeats from another boot ID, boot-other":            hb(w, "boot-other"),
			"holds no heartbeat of its agent that carries a boot ID": hb(w, ""),
		}
		for _, say := range says {
			w.r.Heartbeats = beats[say]
			res, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter < retryAgentBoot || res.RequeueAfter > retryAgentBootMax {
				t.Errorf("requeued after %s, want %s..%s: heartbeats wake no reconcile", res.RequeueAfter, retryAgentBoot, retryAgentBootMax)
			}
			nf, node := w.reconcile(t)
			wantHeld(t, nf, node, ReasonRebootUnconfirmed)
			if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); !strings.Contains(c.Message, say) || !strings.Contains(c.Message, v1alpha1.AnnotationUnfenceRequest) {
				t.Errorf("condition message %q: want it to say %q and how to confirm the node clean", c.Message, say)
			}
		}
		w.r.Heartbeats = hb(w, bootAfter)
		nf, node := w.reconcile(t)
		wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
	}
	released := func(t *testing.T, w *world, wantAgentBoot string) {
		t.Helper()
		nf := w.run(t)
		if nf.Status.Phase != v1alpha1.PhaseReleased || nf.Status.AgentBootID != wantAgentBoot {
			t.Fatalf("fence ended %s with status.agentBootID %q, want Released with %q:\n%s", nf.Status.Phase, nf.Status.AgentBootID, wantAgentBoot, goldenTrace(nf))
		}
		w.tick = nil
	}
	// heardWhenTheFenceBegan runs n1's fence to its release, its agent heard when the fence
	// began only (gone down with the machine, or cut off from the controller).
	heardWhenTheFenceBegan := func(t *testing.T, w *world) {
		t.Helper()
		w.setNode(t, back(bootAtFence))
		w.r.Heartbeats = hb(w, bootAtFence)
		w.tick = func(nf *v1alpha1.NodeFence) {
			if len(nf.Status.Steps) > 0 {
				w.r.Heartbeats = heartbeats{}
			}
		}
		w.setNode(t, notReady)
		released(t, w, bootAtFence)
	}
	every := []string{"still heartbeats from boot ID " + bootAtFence, "holds no heartbeat of its agent", "heartbeats from another boot ID, boot-other", "holds no heartbeat of its agent that carries a boot ID"}

	t.Run("executor, agent heard", func(t *testing.T) {
		w := newWorld(t, "executor")
		w.setNode(t, back(bootAtFence))
		w.r.Heartbeats = hb(w, bootAtFence)
		w.tick = func(*v1alpha1.NodeFence) { w.r.Heartbeats = hb(w, bootAtFence) } // the agent beats on
		released(t, w, bootAtFence)
		heldUntilTheAgent(t, w, every...)
	})
	t.Run("executor, confirmed without a heartbeat held", func(t *testing.T) {
		w := newWorld(t, "executor") // an answer through the API server; the agent's answer had no boot ID
		w.setNode(t, back(bootAtFence))
		released(t, w, "")
		heldUntilTheAgent(t, w, "holds no heartbeat of its agent")
	})
	t.Run("storage fence, agent heard when the fence began", func(t *testing.T) {
		w, _ := storageWorld(t, &storage{answers: []providers.Status{{State: providers.Confirmed, Message: "lifted"}}}, storageMethod)
		heardWhenTheFenceBegan(t, w)
		heldUntilTheAgent(t, w, "holds no heartbeat of its agent")
	})
	t.Run("storage fence, no agent heard during the fence", func(t *testing.T) {
		w, _ := storageWorld(t, &storage{answers: []providers.Status{{State: providers.Confirmed, Message: "lifted"}}}, storageMethod)
		w.setNode(t, back(bootAtFence))
		w.setNode(t, notReady)
		released(t, w, "")
		// Its agent heard now, in the fence's boot or another, disagrees with the kubelet.
		heldUntilTheAgent(t, w, "still heartbeats from boot ID "+bootAtFence, "heartbeats from another boot ID, boot-other")
	})
	t.Run("storage fence, no agent at all", func(t *testing.T) {
		w, _ := storageWorld(t, &storage{answers: []providers.Status{{State: providers.Confirmed, Message: "lifted"}}}, storageMethod)
		w.setNode(t, back(bootAtFence))
		w.setNode(t, notReady)
		released(t, w, "")
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
			heardWhenTheFenceBegan(t, w)
			if method == "self-fence" {
				heldUntilTheAgent(t, w, "holds no heartbeat of its agent")
				return
			}
			w.setNode(t, back(bootAfter))
			nf, node := w.reconcile(t)
			wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
		})
	}
	// A power-off shown not to have happened (the node posted its status in the fence's boot
	// after it) kept the machine on after all.
	t.Run("ipmi, power-off disproved", func(t *testing.T) {
		w := newWorld(t, "ipmi")
		heardWhenTheFenceBegan(t, w)
		nf, _ := w.reconcile(t)
		w.setNode(t, postedIn(bootAtFence, nf.Status.FencedTime.Add(time.Minute)))
		nf, node := w.reconcile(t)
		wantHeld(t, nf, node, ReasonPowerOffDisproved)
		heldUntilTheAgent(t, w, "holds no heartbeat of its agent", "still heartbeats from boot ID "+bootAtFence)
	})
	// The taint taken off by hand turns the hold into TaintRemoved; it is still judged again
	// without a change of the Node.
	t.Run("taint removed while held", func(t *testing.T) {
		w := newWorld(t, "executor")
		w.setNode(t, back(bootAtFence))
		released(t, w, "")
		w.setNode(t, func(n *corev1.Node) {
			back(bootAfter)(n)
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintOutOfService })
		})
		res, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
		if err != nil {
			t.Fatal(err)
		}
		nf, _ := w.reconcile(t)
		if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); c.Reason != ReasonTaintRemoved || !strings.Contains(c.Message, ReasonRebootUnconfirmed) || res.RequeueAfter == 0 {
			t.Errorf("Recovered %s %q, requeued after %s: want TaintRemoved naming %s, judged again", c.Reason, c.Message, res.RequeueAfter, ReasonRebootUnconfirmed)
		}
	})
}

// A node held RebootUnconfirmed is judged again every 5 s at first, then less often: a sixth of
// the time since it came back (Ready), a minute at most — however long it was down before.
func TestAgentBootRetry(t *testing.T) {
	since := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(since)}}}}
	for _, tc := range []struct{ back, want time.Duration }{
		{-time.Minute, retryAgentBoot}, {0, retryAgentBoot}, {20 * time.Second, retryAgentBoot}, {2 * time.Minute, 20 * time.Second}, {time.Hour, retryAgentBootMax},
	} {
		if got := agentBootRetry(node, since.Add(tc.back)); got != tc.want {
			t.Errorf("back for %s: judged again after %s, want %s", tc.back, got, tc.want)
		}
	}
	if got := agentBootRetry(&corev1.Node{}, since); got != retryAgentBoot {
		t.Errorf("no Ready condition: %s, want %s", got, retryAgentBoot)
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
	w.setNode(t, postedIn(bootMidFence, nf.Status.FencedTime.Add(time.Minute)))
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
