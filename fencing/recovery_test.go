package fencing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/fake"
)

const (
	bootAtFence = "boot-1"
	bootAfter   = "boot-2"
)

// setNode edits n1 as its kubelet (status) or an operator (annotations) would.
func (w *world) setNode(t *testing.T, edit func(*corev1.Node)) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	edit(node)
	status := node.Status.DeepCopy()
	if err := w.c.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status = *status
	if err := w.c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
}

// back makes n1 Ready with bootID.
func back(bootID string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Status.NodeInfo.BootID = bootID
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	}
}

// postedIn is the node back in boot, its kubelet's Ready posted (its heartbeat stamped) at at.
func postedIn(boot string, at time.Time) func(*corev1.Node) {
	return func(n *corev1.Node) {
		back(boot)(n)
		n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(at)
	}
}

func notReady(n *corev1.Node) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
}

// confirmedClean sets an unfence request recorded as set by user.
func confirmedClean(user, text string) func(*corev1.Node) {
	return setRequest(v1alpha1.AnnotationUnfenceRequest, v1alpha1.AnnotationUnfenceRequestedBy, text, user)
}

// fenceRequest sets a fence request recorded as set by user.
func fenceRequest(text, user string) func(*corev1.Node) {
	return setRequest(v1alpha1.AnnotationFenceRequest, v1alpha1.AnnotationFenceRequestedBy, text, user)
}

// setRequest sets the request annotation key to text, and byKey to user.
func setRequest(key, byKey, text, user string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[key] = text
		n.Annotations[byKey] = user
	}
}

// releasedWorld is a world whose fence of n1 (fenced with boot ID bootAtFence, by IPMI) was
// released; edit changes the fence before it runs.
func releasedWorld(t *testing.T, edit func(*v1alpha1.NodeFence)) (*world, *recorder) {
	t.Helper()
	w := newWorld(t, "ipmi")
	rec := &recorder{}
	w.r.Recorder = rec
	w.release(t, edit)
	return w, rec
}

// release edits n1's fence (when edit is not nil), has n1 go down with boot ID bootAtFence,
// and runs the fence until it is released.
func (w *world) release(t *testing.T, edit func(*v1alpha1.NodeFence)) {
	t.Helper()
	w.setNode(t, back(bootAtFence))
	if edit != nil {
		nf := &v1alpha1.NodeFence{}
		if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
			t.Fatal(err)
		}
		edit(nf)
		if err := w.c.Update(context.Background(), nf); err != nil {
			t.Fatal(err)
		}
	}
	w.setNode(t, notReady) // powered off
	if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("fence ended %s, want Released", nf.Status.Phase)
	}
}

// releasedPowerAndStorageWorld is releasedWorld for a fence whose one level is a power-off
// (ipmi) and then a storage fence, both confirmed; edit changes the fence before it runs.
func releasedPowerAndStorageWorld(t *testing.T, edit func(*v1alpha1.NodeFence)) (*world, *recorder, *storage) {
	t.Helper()
	s := &storage{answers: []providers.Status{{State: providers.Confirmed, Message: "lifted"}}}
	ipmi := v1alpha1.Method{Name: "ipmi", Type: v1alpha1.MethodIPMI, Level: "power-and-storage", Timeout: &metav1.Duration{Duration: 10 * time.Second},
		IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "bmc"}}}
	fence := storageMethod
	fence.Level = ipmi.Level
	w, rec := storageWorld(t, s, ipmi, fence)
	w.release(t, edit)
	return w, rec, s
}

// reconcile reconciles n1's NodeFence once and returns it and n1 as they then stand.
func (w *world) reconcile(t *testing.T) (*v1alpha1.NodeFence, *corev1.Node) {
	t.Helper()
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	if _, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	w.now = w.now.Add(time.Second)
	nf, node := &v1alpha1.NodeFence{}, &corev1.Node{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	return nf, node
}

func tainted(node *corev1.Node) bool { return OutOfService(node) }

// wantHeld checks that the node stays fenced with Recovered=False and the reason.
func wantHeld(t *testing.T, nf *v1alpha1.NodeFence, node *corev1.Node, reason string) {
	t.Helper()
	if nf.Status.Phase != v1alpha1.PhaseReleased || nf.Status.Recovery != nil {
		t.Errorf("phase %s, recovery %+v: want Released and no recovery", nf.Status.Phase, nf.Status.Recovery)
	}
	if !tainted(node) {
		t.Errorf("the out-of-service taint was removed from a node held fenced (%s)", reason)
	}
	c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason {
		t.Fatalf("Recovered condition %+v, want False/%s", c, reason)
	}
	needsPerson := map[string]bool{ReasonBootIDUnchanged: true, ReasonBootIDUnknown: true, ReasonFlapping: true, ReasonAutomaticRecoveryOff: true}
	if needsPerson[reason] && !strings.Contains(c.Message, v1alpha1.AnnotationUnfenceRequest) {
		t.Errorf("condition message %q does not say how to confirm the node clean", c.Message)
	}
}

// wantRecovered checks that the node was unfenced, how.
func wantRecovered(t *testing.T, nf *v1alpha1.NodeFence, node *corev1.Node, how v1alpha1.RecoveryHow) {
	t.Helper()
	wantRecoveredKeeping(t, nf, node, how, false)
}

// wantRecoveredKeeping is wantRecovered for a node whose fence request may be kept (keepsFenceRequest).
func wantRecoveredKeeping(t *testing.T, nf *v1alpha1.NodeFence, node *corev1.Node, how v1alpha1.RecoveryHow, keepsFenceRequest bool) {
	t.Helper()
	if nf.Status.Phase != v1alpha1.PhaseRecovered {
		t.Fatalf("phase %s, want Recovered (conditions %+v)", nf.Status.Phase, nf.Status.Conditions)
	}
	if tainted(node) {
		t.Error("the out-of-service taint is still on the recovered node")
	}
	if r := nf.Status.Recovery; r == nil || r.How != how || r.RecoveredTime == nil {
		t.Errorf("recovery record %+v, want %s with a recovered time", r, how)
	}
	c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(how) {
		t.Errorf("Recovered condition %+v, want True/%s", c, how)
	}
	for _, a := range []string{v1alpha1.AnnotationFenceRequest, v1alpha1.AnnotationFenceRequestedBy, v1alpha1.AnnotationUnfenceRequest, v1alpha1.AnnotationUnfenceRequestedBy} {
		if _, ok := node.Annotations[a]; ok && !(keepsFenceRequest && (a == v1alpha1.AnnotationFenceRequest || a == v1alpha1.AnnotationFenceRequestedBy)) {
			t.Errorf("annotation %s left on the recovered node", a)
		}
	}
}

// A released node is unfenced once it is back and rebooted, and only then (invariant 5).
func TestRecoveryAfterReboot(t *testing.T) {
	w, rec := releasedWorld(t, nil)
	nf, node := w.reconcile(t)
	if nf.Status.BootID != bootAtFence {
		t.Fatalf("boot ID at the fence %q, want %q", nf.Status.BootID, bootAtFence)
	}
	wantHeld(t, nf, node, ReasonNodeNotBack)

	w.setNode(t, back(bootAtFence)) // the kubelet started again, no reboot
	nf, node = w.reconcile(t)
	wantHeld(t, nf, node, ReasonBootIDUnchanged)
	nf, node = w.reconcile(t) // said once
	wantHeld(t, nf, node, ReasonBootIDUnchanged)

	w.setNode(t, back(bootAfter))
	nf, node = w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
	if nf.Status.Recovery.BootID != bootAfter || !strings.Contains(nf.Status.Recovery.Reason, bootAtFence) {
		t.Errorf("recovery record %+v does not name the boot IDs", nf.Status.Recovery)
	}
	var unfenced, unchanged int
	for _, e := range rec.recorded() {
		switch e.Reason {
		case ReasonUnfenced:
			unfenced++
		case ReasonBootIDUnchanged:
			unchanged++
		}
	}
	if unfenced != 2 || unchanged != 2 { // on the NodeFence and on the Node, once each
		t.Errorf("events %v: want Unfenced and BootIDUnchanged once each on the fence and the node", rec.recorded())
	}
	// Recovered is the end: nothing more happens to the node.
	w.setNode(t, notReady)
	if nf2, node2 := w.reconcile(t); nf2.Status.Phase != v1alpha1.PhaseRecovered || tainted(node2) {
		t.Errorf("a recovered fence acted again: phase %s, tainted %v", nf2.Status.Phase, tainted(node2))
	}
}

// A power fence's node whose kubelet posts its status after the confirmed power-off with the
// boot ID it had when fenced never lost power: held as PowerOffDisproved (once, counted as a
// disproved fence), not as a node that merely did not reboot. A Ready condition posted before
// the confirmation (not yet marked stale) is no such evidence, and neither is an Executor
// fence's node, which keeps its power.
func TestPowerOffDisproved(t *testing.T) {
	posted := func(at time.Time) func(*corev1.Node) { return postedIn(bootAtFence, at) }
	t.Run("status posted after the power-off", func(t *testing.T) {
		w, rec := releasedWorld(t, nil)
		nf, _ := w.reconcile(t)
		before := testutil.ToFloat64(fencesDisproved.WithLabelValues("ipmi", signalBootID))
		w.setNode(t, posted(nf.Status.FencedTime.Add(40*time.Second)))
		nf, node := w.reconcile(t)
		wantHeld(t, nf, node, ReasonPowerOffDisproved)
		w.setNode(t, posted(nf.Status.FencedTime.Add(50*time.Second)))
		nf, node = w.reconcile(t)
		wantHeld(t, nf, node, ReasonPowerOffDisproved)
		c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered)
		for _, want := range []string{"never lost power", "boot ID it had when fenced (" + bootAtFence + ")", "method ipmi", "power it off by hand"} {
			if !strings.Contains(c.Message, want) {
				t.Errorf("message %q lacks %q", c.Message, want)
			}
		}
		if got := testutil.ToFloat64(fencesDisproved.WithLabelValues("ipmi", signalBootID)) - before; got != 1 {
			t.Errorf("palisade_fences_disproved_total{signal=%q} rose by %v, want 1", signalBootID, got)
		}
		if n := countOfReason(rec, ReasonPowerOffDisproved); n != 2 { // the fence and the node, once each
			t.Errorf("%d %s events, want 2: %v", n, ReasonPowerOffDisproved, rec.recorded())
		}
	})
	// An unfence request made while the node was down (NodeNotBack), trusting the power-off,
	// vouched for a machine believed off: when the machine shows it never lost power, the
	// request is removed and PowerOffDisproved said; one made after that is honoured.
	t.Run("a request made before the disproval", func(t *testing.T) {
		w, rec := releasedWorld(t, nil)
		nf, node := w.reconcile(t)
		wantHeld(t, nf, node, ReasonNodeNotBack)
		w.setNode(t, confirmedClean("alice", "it is off, the BMC says so"))
		nf, node = w.reconcile(t)
		wantHeld(t, nf, node, ReasonNodeNotBack) // not Ready: nothing honoured yet
		w.setNode(t, posted(nf.Status.FencedTime.Add(5*time.Minute)))
		nf, node = w.reconcile(t)
		wantHeld(t, nf, node, ReasonPowerOffDisproved)
		if _, ok := node.Annotations[v1alpha1.AnnotationUnfenceRequest]; ok {
			t.Errorf("the request made before the disproval is still on the node")
		}
		if said := rec.said(ReasonStaleUnfenceRequest); len(said) == 0 || !strings.Contains(said[0], "PowerOffDisproved") {
			t.Errorf("no %s event saying why: %q", ReasonStaleUnfenceRequest, said)
		}
		w.setNode(t, confirmedClean("alice", "powered off by hand at the PDU, then on"))
		nf, node = w.reconcile(t)
		wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
	})
	// A level of a power-off and a storage fence (power listed first, so that status.method
	// names the storage fence) cut the power as much as a power method alone: a request made
	// while the node was down is removed once the machine shows it never lost power, and the
	// storage fence is not lifted under it.
	t.Run("a level of a power-off and a storage fence", func(t *testing.T) {
		w, rec, s := releasedPowerAndStorageWorld(t, nil)
		nf, node := w.reconcile(t)
		if nf.Status.Method != storageMethod.Name || nf.Status.PowerOffMethod() != "ipmi" {
			t.Fatalf("status.method %q, power-off by %q: want the level's last method (%s) and ipmi", nf.Status.Method, nf.Status.PowerOffMethod(), storageMethod.Name)
		}
		wantHeld(t, nf, node, ReasonNodeNotBack)
		w.setNode(t, confirmedClean("alice", "it is off, the BMC says so"))
		nf, node = w.reconcile(t)
		wantHeld(t, nf, node, ReasonNodeNotBack)
		w.setNode(t, posted(nf.Status.FencedTime.Add(5*time.Minute)))
		nf, node = w.reconcile(t)
		wantHeld(t, nf, node, ReasonPowerOffDisproved)
		if _, ok := node.Annotations[v1alpha1.AnnotationUnfenceRequest]; ok {
			t.Errorf("the request made before the disproval is still on the node")
		}
		if nf.Status.PowerOffDisprovedTime == nil {
			t.Error("PowerOffDisproved seen, not recorded (status.powerOffDisprovedTime)")
		}
		if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); !strings.Contains(c.Message, "method ipmi confirmed its power off") {
			t.Errorf("message %q does not name the power method", c.Message)
		}
		if s.lifts != 0 {
			t.Errorf("the storage fence was lifted %d times under a machine that never lost power", s.lifts)
		}
		if said := rec.said(ReasonStaleUnfenceRequest); len(said) == 0 {
			t.Errorf("no %s event", ReasonStaleUnfenceRequest)
		}
	})
	// Seen once, PowerOffDisproved is recorded: a request made after it is honoured even when
	// the node went NotReady meanwhile, or the first request was malformed.
	for _, detour := range []struct {
		name string
		edit func(*corev1.Node)
		held string
	}{
		{"a request made after it, through a NotReady spell", notReady, ReasonNodeNotBack},
		{"a malformed request, then a good one", confirmedClean("alice", " "), ReasonInvalidUnfenceRequest},
	} {
		t.Run(detour.name, func(t *testing.T) {
			w, _ := releasedWorld(t, nil)
			nf, _ := w.reconcile(t)
			fenced := nf.Status.FencedTime.Time
			w.setNode(t, posted(fenced.Add(time.Minute)))
			nf, node := w.reconcile(t)
			wantHeld(t, nf, node, ReasonPowerOffDisproved)
			if nf.Status.PowerOffDisprovedTime == nil {
				t.Fatal("PowerOffDisproved seen, not recorded (status.powerOffDisprovedTime)")
			}
			w.setNode(t, detour.edit)
			nf, node = w.reconcile(t)
			wantHeld(t, nf, node, detour.held)
			w.setNode(t, confirmedClean("alice", "stopped by hand, then checked"))
			w.setNode(t, posted(fenced.Add(2*time.Minute)))
			nf, node = w.reconcile(t)
			wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
		})
	}
	// A power-on that keeps failing does not hide the disproval, nor is it tried on a machine
	// shown to be on.
	t.Run("with recovery.powerOn failing", func(t *testing.T) {
		w, _ := releasedWorld(t, func(nf *v1alpha1.NodeFence) { nf.Spec.Recovery.PowerOn = true })
		for range 3 {
			w.power.InjectError(fake.MethodRestorePower, providers.NewError(providers.ReasonUnreachable, errors.New("BMC unreachable")))
		}
		nf, node := w.reconcile(t)
		wantHeld(t, nf, node, ReasonPowerOnFailed)
		w.setNode(t, posted(nf.Status.FencedTime.Add(time.Minute)))
		nf, node = w.reconcile(t)
		wantHeld(t, nf, node, ReasonPowerOffDisproved)
		w.setNode(t, confirmedClean("alice", "stopped by hand, then checked"))
		nf, node = w.reconcile(t)
		wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
		if n := w.power.CallCount(fake.MethodRestorePower, "n1"); n != 1 {
			t.Errorf("RestorePower called %d times, want 1: none once the machine showed it is on", n)
		}
	})
	// A recovery already decided (its record written, its storage still lifting, say) keeps
	// the request it honoured, whatever the node shows meanwhile.
	t.Run("a recovery decided before the disproval was seen", func(t *testing.T) {
		w, rec := releasedWorld(t, nil)
		nf, _ := w.reconcile(t)
		nf.Status.Recovery = &v1alpha1.RecoveryRecord{How: v1alpha1.RecoveryConfirmedClean, Time: metav1.NewTime(w.now), Reason: "checked"}
		setCondition(nf, v1alpha1.ConditionRecovered, metav1.ConditionFalse, ReasonRecovering, "unfencing: checked")
		if err := w.c.Status().Update(context.Background(), nf); err != nil {
			t.Fatal(err)
		}
		w.setNode(t, confirmedClean("alice", "checked"))
		w.setNode(t, posted(nf.Status.FencedTime.Add(time.Minute)))
		nf, node := w.reconcile(t)
		wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
		if said := rec.said(ReasonStaleUnfenceRequest); len(said) > 0 {
			t.Errorf("the request a decided recovery honoured was said stale: %q", said)
		}
	})
	t.Run("Ready from before the power-off", func(t *testing.T) {
		w, _ := releasedWorld(t, nil)
		nf, _ := w.reconcile(t)
		w.setNode(t, posted(nf.Status.FencedTime.Add(-30*time.Second)))
		nf, node := w.reconcile(t)
		wantHeld(t, nf, node, ReasonBootIDUnchanged)
	})
	t.Run("Ready from before the power-off, the kubelet's clock 25s ahead", func(t *testing.T) {
		w, _ := releasedWorld(t, nil)
		nf, _ := w.reconcile(t)
		w.setNode(t, posted(nf.Status.FencedTime.Add(-5*time.Second+25*time.Second)))
		nf, node := w.reconcile(t)
		wantHeld(t, nf, node, ReasonBootIDUnchanged)
	})
	t.Run("under a policy that unfences only on request", func(t *testing.T) {
		off := false
		w, _ := releasedWorld(t, func(nf *v1alpha1.NodeFence) { nf.Spec.Recovery.Automatic = &off })
		nf, _ := w.reconcile(t)
		w.setNode(t, posted(nf.Status.FencedTime.Add(time.Minute)))
		nf, node := w.reconcile(t)
		wantHeld(t, nf, node, ReasonPowerOffDisproved)
	})
	t.Run("an Executor fence keeps the power on", func(t *testing.T) {
		w, _ := releasedWorld(t, nil)
		nf, _ := w.reconcile(t)
		for i := range nf.Spec.Methods {
			nf.Spec.Methods[i].Type, nf.Spec.Methods[i].IPMI = v1alpha1.MethodExecutor, nil
		}
		if err := w.c.Update(context.Background(), nf); err != nil {
			t.Fatal(err)
		}
		w.setNode(t, posted(nf.Status.FencedTime.Add(time.Minute)))
		nf, node := w.reconcile(t)
		wantHeld(t, nf, node, ReasonBootIDUnchanged)
	})
}

// An operator's confirmation unfences a node that did not reboot, recording who and why; a
// malformed one changes nothing.
func TestRecoveryConfirmedClean(t *testing.T) {
	w, _ := releasedWorld(t, nil)
	w.setNode(t, back(bootAtFence))
	nf, node := w.reconcile(t) // the first look after the release
	wantHeld(t, nf, node, ReasonBootIDUnchanged)
	w.setNode(t, confirmedClean("alice@example.com", " "))
	nf, node = w.reconcile(t)
	wantHeld(t, nf, node, ReasonInvalidUnfenceRequest)

	w.setNode(t, confirmedClean("alice@example.com", "reinstalled from the golden image, ticket 4711"))
	nf, node = w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
	if r := nf.Status.Recovery; r.RequestedBy != "alice@example.com" || r.Reason != "reinstalled from the golden image, ticket 4711" {
		t.Errorf("recovery record %+v: want alice's words", r)
	}
}

// An unfence request left on the node from before its fence (a fence deleted before its
// recovery, a request on a node that had none) is not this fence's: it is removed before the
// fence's first step, so that the node, its Ready still the stale True of a fast fence and its
// boot ID unchanged, is held when released rather than given back at once.
func TestStaleUnfenceRequestIsNotHonoured(t *testing.T) {
	w := newWorld(t, "ipmi")
	rec := &recorder{}
	w.r.Recorder = rec
	w.setNode(t, back(bootAtFence))
	w.setNode(t, confirmedClean("alice", "wiped last spring"))
	if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("fence ended %s, want Released (held)", nf.Status.Phase)
	}
	nf, node := w.reconcile(t)
	wantHeld(t, nf, node, ReasonBootIDUnchanged)
	if _, ok := node.Annotations[v1alpha1.AnnotationUnfenceRequest]; ok {
		t.Errorf("the stale unfence request is still on the node: %v", node.Annotations)
	}
	if _, ok := node.Annotations[v1alpha1.AnnotationUnfenceRequestedBy]; ok {
		t.Errorf("the stale unfence requester is still on the node: %v", node.Annotations)
	}
	if !slices.ContainsFunc(rec.recorded(), func(e eventSeen) bool { return e.Reason == ReasonStaleUnfenceRequest }) {
		t.Errorf("no %s event: %v", ReasonStaleUnfenceRequest, rec.recorded())
	}
	// A request made after the release is honoured.
	w.setNode(t, confirmedClean("alice", "checked after the fence"))
	nf, node = w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
}

// An unfence request made while the fence was under way vouches for the node before what it
// vouches for was released: the first look after the release removes it, and says so. Made
// after that look, a request is honoured.
func TestUnfenceRequestMadeDuringTheFenceIsNotHonoured(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps int // the request is made once the record holds this many steps
	}{
		{"after the first step", 1},
		{"during the release", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, "ipmi")
			rec := &recorder{}
			w.r.Recorder = rec
			w.setNode(t, back(bootAtFence))
			made := false
			w.tick = func(nf *v1alpha1.NodeFence) {
				if !made && len(nf.Status.Steps) >= tc.steps {
					made = true
					w.setNode(t, confirmedClean("bob", "looked fine to me"))
				}
			}
			if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased || !made {
				t.Fatalf("fence ended %s (request made: %v), want Released", nf.Status.Phase, made)
			}
			w.tick = nil
			nf, node := w.reconcile(t)
			wantHeld(t, nf, node, ReasonBootIDUnchanged)
			if _, ok := node.Annotations[v1alpha1.AnnotationUnfenceRequest]; ok {
				t.Errorf("the request made during the fence is still on the node: %v", node.Annotations)
			}
			if said := rec.said(ReasonStaleUnfenceRequest); len(said) == 0 || !strings.Contains(said[0], "made before this fence was released") {
				t.Errorf("no %s event saying when the request was made: %q", ReasonStaleUnfenceRequest, said)
			}
			w.setNode(t, confirmedClean("bob", "checked after the release"))
			nf, node = w.reconcile(t)
			wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
		})
	}
}

// The out-of-service taint taken off a held node by someone else is said, on the NodeFence and
// the Node, with what the hold still waits for; the node is still unfenced once it is clean.
func TestTaintRemovedFromAHeldNode(t *testing.T) {
	untaint := func(n *corev1.Node) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintOutOfService })
	}
	for _, tc := range []struct {
		name  string
		state func(*corev1.Node)
		was   string
	}{
		{"back without a reboot", back(bootAtFence), ReasonBootIDUnchanged},
		{"still down", notReady, ReasonNodeNotBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, rec := releasedWorld(t, nil)
			w.setNode(t, tc.state)
			nf, node := w.reconcile(t)
			wantHeld(t, nf, node, tc.was)
			w.setNode(t, untaint)
			nf, _ = w.reconcile(t)
			c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered)
			if nf.Status.Phase != v1alpha1.PhaseReleased || c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonTaintRemoved ||
				!strings.Contains(c.Message, "("+tc.was+")") || !strings.Contains(c.Message, "kubectl taint node n1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute") {
				t.Fatalf("phase %s, Recovered %+v: want Released, held as %s naming %s and how to put the taint back", nf.Status.Phase, c, ReasonTaintRemoved, tc.was)
			}
			var warned []string
			for _, e := range rec.recorded() {
				if e.Reason == ReasonTaintRemoved && e.Type == corev1.EventTypeWarning {
					warned = append(warned, e.On)
				}
			}
			if want := []string{"NodeFence/n1", "Node/n1"}; !slices.Equal(warned, want) {
				t.Errorf("%s warnings on %v, want on %v", ReasonTaintRemoved, warned, want)
			}
			// Clean after all: unfenced as usual.
			w.setNode(t, back(bootAfter))
			nf, node = w.reconcile(t)
			wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
		})
	}
	// A fence that never tainted (release.outOfServiceTaint: false) has no taint to miss.
	off := false
	w, _ := releasedWorld(t, func(nf *v1alpha1.NodeFence) { nf.Spec.Release.OutOfServiceTaint = &off })
	w.setNode(t, back(bootAtFence))
	nf, _ := w.reconcile(t)
	if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); c == nil || c.Reason != ReasonBootIDUnchanged {
		t.Errorf("a fence without the taint step: Recovered %+v, want %s", c, ReasonBootIDUnchanged)
	}
}

// Recovery takes off only the out-of-service taint its fence added: a taint an operator (or
// another controller) put on before the fence (whose Taint step then found it present), or put
// on while the node was held by a fence that never tainted, is someone else's decision. It stays
// on the unfenced node, said on the NodeFence and the Node with the command that removes it.
func TestRecoveryKeepsAnOutOfServiceTaintItDidNotAdd(t *testing.T) {
	hourBefore := metav1.NewTime(time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC))
	operators := func(added *metav1.Time) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "operator",
				Effect: corev1.TaintEffectNoExecute, TimeAdded: added})
		}
	}
	off := false
	for _, tc := range []struct {
		name   string
		before func(*corev1.Node)        // on the node before the fence
		edit   func(*v1alpha1.NodeFence) // the fence's spec
		held   func(*corev1.Node)        // done to the node while it is held
	}{
		{name: "put on before the fence", before: operators(&hourBefore)},
		{name: "put on before the fence, without a time", before: operators(nil)},
		{name: "put on while held by a fence that never tainted", edit: func(nf *v1alpha1.NodeFence) { nf.Spec.Release.OutOfServiceTaint = &off }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, "ipmi")
			rec := &recorder{}
			w.r.Recorder = rec
			if tc.before != nil {
				w.setNode(t, tc.before)
			}
			w.release(t, tc.edit)
			if tc.before == nil {
				at := metav1.NewTime(w.now)
				w.setNode(t, operators(&at))
			}
			w.setNode(t, back(bootAfter))
			nf, node := w.reconcile(t)
			if nf.Status.Phase != v1alpha1.PhaseRecovered || nf.Status.Recovery == nil || nf.Status.Recovery.How != v1alpha1.RecoveryRebooted {
				t.Fatalf("phase %s, recovery %+v: want Recovered, rebooted", nf.Status.Phase, nf.Status.Recovery)
			}
			var kept []corev1.Taint
			for _, tt := range node.Spec.Taints {
				if tt.Key == v1alpha1.TaintOutOfService {
					kept = append(kept, tt)
				}
			}
			if len(kept) != 1 || kept[0].Value != "operator" || kept[0].Effect != corev1.TaintEffectNoExecute {
				t.Fatalf("out-of-service taints %+v on the unfenced node, want the operator's alone, kept", kept)
			}
			var said []string
			for i, e := range rec.recorded() {
				if e.Reason == ReasonTaintKept && e.Type == corev1.EventTypeWarning {
					said = append(said, e.On)
					if msg := rec.messages[i]; !strings.Contains(msg, "kubectl taint node n1 node.kubernetes.io/out-of-service-") || !strings.Contains(msg, "=operator:NoExecute") {
						t.Errorf("%s says %q: want the taint named and the command that removes it", ReasonTaintKept, msg)
					}
				}
			}
			if want := []string{"NodeFence/n1", "Node/n1"}; !slices.Equal(said, want) {
				t.Errorf("%s warnings on %v, want on %v", ReasonTaintKept, said, want)
			}
			if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); strings.Contains(c.Message, "taint removed") || !strings.Contains(c.Message, "stays") {
				t.Errorf("Recovered says %q: want the kept taint said, not a removal", c.Message)
			}
			if tc.before != nil && !nf.Status.TaintFound {
				t.Errorf("status.taintFound is false: the Taint step found the operator's taint and should have recorded it")
			}
		})
	}
	// The fence's own taint goes, and so does one put back by hand (kubectl sets no timeAdded)
	// after someone took it off while the node was held, as the TaintRemoved hold asks; nothing
	// is said about either.
	for _, putBack := range []bool{false, true} {
		w, rec := releasedWorld(t, nil)
		if putBack {
			w.setNode(t, func(n *corev1.Node) { n.Spec.Taints = nil })
			if nf, _ := w.reconcile(t); meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered).Reason != ReasonTaintRemoved {
				t.Fatalf("the taint taken off a held node: want %s", ReasonTaintRemoved)
			}
			w.setNode(t, operators(nil))
		}
		w.setNode(t, back(bootAfter))
		nf, node := w.reconcile(t)
		wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
		if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); !strings.Contains(c.Message, "out-of-service taint removed") {
			t.Errorf("put back %t: Recovered says %q, want the taint's removal", putBack, c.Message)
		}
		for _, e := range rec.recorded() {
			if e.Reason == ReasonTaintKept {
				t.Errorf("put back %t: %s said of the fence's own taint", putBack, ReasonTaintKept)
			}
		}
	}
}

// A fence request is never lost without a word: one made while the fence was under way is
// answered by it (removed at the first look after the release, said); one made while the node
// was held is kept when the node is given back, and said, so that the node is fenced again; a
// manual fence's own request goes with the recovery.
func TestFenceRequestsAroundARecovery(t *testing.T) {
	for _, tc := range []struct {
		name       string
		manual     bool // the fence is carol's request "disk errors"
		duringHold bool // the request is made while held, else while the fence is under way
		noTaint    bool // release.outOfServiceTaint: false
		text       string
		by         string // the request's requester; "" for carol
		kept       bool
		said       string
	}{
		{name: "made during an automatic fence", text: "it looks dead", said: ReasonFenceRequestAnswered},
		{name: "made while held", duringHold: true, text: "fence it again", kept: true, said: ReasonFenceRequestKept},
		{name: "a manual fence's own", manual: true, text: "disk errors"},
		{name: "another one during a manual fence", manual: true, text: "and the PSU", said: ReasonFenceRequestAnswered},
		{name: "made while held, with no taint to remove", duringHold: true, noTaint: true, text: "fence it again", kept: true, said: ReasonFenceRequestKept},
		{name: "a malformed one made while held", duringHold: true, text: "bell\x07"},
		// The manual fence's text again, by someone else, while held: another request, kept.
		{name: "the same text by another while held", manual: true, duringHold: true, text: "disk errors", by: "dave", kept: true, said: ReasonFenceRequestKept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			by := tc.by
			if by == "" {
				by = "carol"
			}
			w := newWorld(t, "ipmi")
			rec := &recorder{}
			w.r.Recorder = rec
			if tc.manual {
				nf := &v1alpha1.NodeFence{}
				if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
					t.Fatal(err)
				}
				nf.Spec.Trigger, nf.Spec.Reason, nf.Spec.RequestedBy = v1alpha1.TriggerManual, "disk errors", "carol"
				if err := w.c.Update(context.Background(), nf); err != nil {
					t.Fatal(err)
				}
				w.setNode(t, fenceRequest("disk errors", "carol"))
			}
			if tc.noTaint {
				nf := &v1alpha1.NodeFence{}
				if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
					t.Fatal(err)
				}
				nf.Spec.Release.OutOfServiceTaint = ptr.To(false)
				if err := w.c.Update(context.Background(), nf); err != nil {
					t.Fatal(err)
				}
			}
			w.setNode(t, back(bootAtFence))
			w.setNode(t, notReady) // powered off
			made := false
			if !tc.duringHold {
				w.tick = func(nf *v1alpha1.NodeFence) {
					if !made && len(nf.Status.Steps) >= 1 {
						made = true
						w.setNode(t, fenceRequest(tc.text, by))
					}
				}
			}
			if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
				t.Fatalf("fence ended %s, want Released", nf.Status.Phase)
			}
			w.tick = nil
			nf, node := w.reconcile(t) // the first look after the release
			if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); tc.noTaint && (c == nil || c.Reason != ReasonNodeNotBack) {
				t.Fatalf("Recovered %+v, want held as %s", c, ReasonNodeNotBack)
			} else if !tc.noTaint {
				wantHeld(t, nf, node, ReasonNodeNotBack)
			}
			if tc.duringHold {
				w.setNode(t, fenceRequest(tc.text, by))
			}
			w.setNode(t, back(bootAfter))
			nf, node = w.reconcile(t)
			wantRecoveredKeeping(t, nf, node, v1alpha1.RecoveryRebooted, tc.kept)
			got, ok := node.Annotations[v1alpha1.AnnotationFenceRequest]
			if ok != tc.kept || tc.kept && got != tc.text {
				t.Errorf("after the recovery the node's fence request is %q (present %v), want kept: %v", got, ok, tc.kept)
			}
			var said []string
			for _, r := range []string{ReasonFenceRequestAnswered, ReasonFenceRequestKept} {
				if m := rec.said(r); len(m) > 0 {
					said = append(said, r)
					if !strings.Contains(m[0], tc.text) || !strings.Contains(m[0], by) {
						t.Errorf("%s does not name the request and its requester: %q", r, m[0])
					}
				}
			}
			if want := []string{tc.said}; tc.said == "" && len(said) > 0 || tc.said != "" && !slices.Equal(said, want) {
				t.Errorf("events said %v, want %q", said, tc.said)
			}
		})
	}
}

// A controller whose cache still shows the released fence as not yet looked at, after the
// first look was saved and an operator confirmed the node clean, reads the record from the
// API server before removing anything: the request made after the look stays.
func TestEarlyRequestsJudgedOnTheRecord(t *testing.T) {
	w, rec := releasedWorld(t, nil)
	ctx := context.Background()
	unlooked := &v1alpha1.NodeFence{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, unlooked); err != nil {
		t.Fatal(err)
	}
	w.setNode(t, back(bootAtFence))
	nf, node := w.reconcile(t) // the first look, saved
	wantHeld(t, nf, node, ReasonBootIDUnchanged)
	w.setNode(t, confirmedClean("alice", "checked after the release"))
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	// The stale copy's own write is refused; what matters is what it removed first.
	_ = w.r.dropEarlyRequests(ctx, unlooked, node)
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	if node.Annotations[v1alpha1.AnnotationUnfenceRequest] != "checked after the release" {
		t.Errorf("a request made after the first look was removed on a stale copy's word: %v", node.Annotations)
	}
	if said := rec.said(ReasonStaleUnfenceRequest); len(said) > 0 {
		t.Errorf("%s said for a request made after the first look: %q", ReasonStaleUnfenceRequest, said)
	}
	nf, node = w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
}

// A Node deleted and registered anew under the same name (another UID) since the fence, with
// another boot ID, is not taken for the fenced machine rebooted: it may be another machine,
// and the fenced one may still run (a storage fence's machine keeps its power). Held as
// NodeReplaced until confirmed clean; a fence recorded without the UID is judged as before.
func TestRecoveryOfANodeRegisteredAnew(t *testing.T) {
	w, _ := releasedWorld(t, nil)
	fencedWithUID(t, w, "uid-at-fence")
	// Registered anew: another UID, another boot ID, and none of the old Node's taints.
	w.setNode(t, func(n *corev1.Node) { back(bootAfter)(n); n.UID, n.Spec.Taints = "uid-registered-anew", nil })
	nf, node := w.reconcile(t)
	if nf.Status.Phase != v1alpha1.PhaseReleased || nf.Status.Recovery != nil {
		t.Errorf("phase %s, recovery %+v: want Released and no recovery", nf.Status.Phase, nf.Status.Recovery)
	}
	c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonNodeReplaced {
		t.Fatalf("Recovered condition %+v, want False/%s (not TaintRemoved: the new Node never had the taint)", c, ReasonNodeReplaced)
	}
	for _, want := range []string{"registered anew", "uid-at-fence", "uid-registered-anew", v1alpha1.AnnotationUnfenceRequest} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("condition message %q does not say %q", c.Message, want)
		}
	}
	w.setNode(t, confirmedClean("alice", "the old machine was wiped"))
	nf, node = w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)

	// The same UID, a new boot ID: rebooted, as before.
	w2, _ := releasedWorld(t, nil)
	fencedWithUID(t, w2, "uid-at-fence")
	w2.setNode(t, back(bootAfter))
	nf2, node2 := w2.reconcile(t)
	wantRecovered(t, nf2, node2, v1alpha1.RecoveryRebooted)
}

// fencedWithUID gives n1 the UID uid, and its released fence the record of it.
func fencedWithUID(t *testing.T, w *world, uid types.UID) {
	t.Helper()
	w.setNode(t, func(n *corev1.Node) { n.UID = uid })
	nf := &v1alpha1.NodeFence{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	nf.Status.NodeUID = string(uid)
	if err := w.c.Status().Update(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
}

// A Node deleted and registered anew under the fenced one's name (another UID) before the
// release ended holds the release: pods bound to the name run on the machine that registered,
// and force-deleting them would let their replacements start beside them. Nothing is tainted
// or deleted, and the step says why (NodeReplaced).
func TestReleaseHeldForANodeRegisteredAnew(t *testing.T) {
	w := newWorld(t, "ipmi")
	w.setNode(t, func(n *corev1.Node) { n.UID = "uid-fenced" })
	replaced := false
	w.tick = func(nf *v1alpha1.NodeFence) {
		if nf.Status.FencedTime != nil && !replaced {
			w.setNode(t, func(n *corev1.Node) { n.UID = "uid-registered-anew" })
			replaced = true
		}
	}
	nf, ended := w.advance(t)
	if ended || !replaced {
		t.Fatalf("fence ended %t (phase %s), Node replaced %t: want the release held after the replacement", ended, nf.Status.Phase, replaced)
	}
	checkReleased(t, w, false)
	if last := lastStep(nf); last.State != v1alpha1.StepStarted || last.Reason != ReasonNodeReplaced || !strings.Contains(last.Message, "uid-registered-anew") {
		t.Errorf("last step %s %s %s %q, want a release step held with %s naming the new UID", last.Name, last.State, last.Reason, last.Message, ReasonNodeReplaced)
	}
}

// A fence that found no Node at its first look records no UID; a Node registered under the name
// after the NodeFence was made is still not the one fenced: the release is held (NodeReplaced),
// and the new Node is neither tainted nor has its pods deleted; recovery holds it too.
func TestReleaseHeldForANodeRegisteredAfterAFenceWithoutItsUID(t *testing.T) {
	ctx := context.Background()
	for _, taint := range []bool{true, false} { // without the taint, the pods' deletion is the first release step
		t.Run(fmt.Sprintf("outOfServiceTaint=%t", taint), func(t *testing.T) { releaseHeldWithoutUID(t, taint) })
	}

	// A released fence without a UID, its Node created before the NodeFence: the same Node,
	// unfenced after a reboot as before; created after it: held as NodeReplaced.
	for _, tc := range []struct {
		name  string
		after time.Duration
		held  bool
	}{{"created before the fence", -time.Hour, false}, {"created after the fence", time.Minute, true}, {"created in the fence's second", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := releasedWorld(t, nil)
			nf := &v1alpha1.NodeFence{}
			if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
				t.Fatal(err)
			}
			nf.CreationTimestamp = metav1.NewTime(w.now.Add(-time.Minute).Truncate(time.Second)) // the fake client sets none
			if err := w.c.Update(ctx, nf); err != nil {
				t.Fatal(err)
			}
			nf.Status.NodeUID = ""
			if err := w.c.Status().Update(ctx, nf); err != nil {
				t.Fatal(err)
			}
			w.setNode(t, func(n *corev1.Node) {
				back(bootAfter)(n)
				n.CreationTimestamp = metav1.NewTime(nf.CreationTimestamp.Add(tc.after))
			})
			nf, node := w.reconcile(t)
			if !tc.held {
				wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
				return
			}
			wantHeld(t, nf, node, ReasonNodeReplaced)
		})
	}
}

// releaseHeldWithoutUID runs a fence of n1 whose Node is gone at its first look and registered
// (created after the NodeFence) once the fence is confirmed: the release must be held.
func releaseHeldWithoutUID(t *testing.T, taint bool) {
	w := newWorld(t, "ipmi")
	ctx := context.Background()
	if !taint {
		nf := &v1alpha1.NodeFence{}
		if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
			t.Fatal(err)
		}
		nf.Spec.Release.OutOfServiceTaint = &taint
		if err := w.c.Update(ctx, nf); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	registered := false
	w.tick = func(nf *v1alpha1.NodeFence) {
		if nf.Status.FencedTime != nil && !registered {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-registered-after",
				CreationTimestamp: metav1.NewTime(nf.CreationTimestamp.Add(time.Minute))}}
			if err := w.c.Create(ctx, node); err != nil {
				t.Fatal(err)
			}
			registered = true
		}
	}
	nf, ended := w.advance(t)
	if ended || !registered || nf.Status.NodeUID != "" {
		t.Fatalf("fence ended %t (phase %s), Node registered %t, nodeUID %q: want no UID recorded and the release held", ended, nf.Status.Phase, registered, nf.Status.NodeUID)
	}
	checkReleased(t, w, false)
	if last := lastStep(nf); last.State != v1alpha1.StepStarted || last.Reason != ReasonNodeReplaced || !strings.Contains(last.Message, "uid-registered-after") ||
		!strings.Contains(last.Message, "no Node at the fence's first look") {
		t.Errorf("last step %s %s %s %q, want a release step held with %s naming the new UID and the missing first look", last.Name, last.State, last.Reason, last.Message, ReasonNodeReplaced)
	}
}

// A Node registered anew between the Taint step's look for that (sameNode) and its own read is
// not tainted either: the step checks the Node it reads itself.
func TestTaintNotPutOnANodeRegisteredAnewMeanwhile(t *testing.T) {
	w := newWorld(t, "ipmi")
	w.setNode(t, func(n *corev1.Node) { n.UID = "uid-fenced" })
	var nf v1alpha1.NodeFence
	replaced := false
	w.r.APIReader = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			err := c.Get(ctx, key, obj, opts...)
			if _, isNode := obj.(*corev1.Node); isNode && err == nil && !replaced {
				if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, &nf); err == nil && len(nf.Status.Steps) > 0 && lastStep(&nf).Name == v1alpha1.StepTaint {
					replaced = true // after the read that looked: the next one finds the Node registered anew
					w.setNode(t, func(n *corev1.Node) { n.UID = "uid-registered-anew" })
				}
			}
			return err
		},
	})
	got, ended := w.advance(t)
	if ended || !replaced {
		t.Fatalf("fence ended %t (phase %s), Node replaced %t: want the release held", ended, got.Status.Phase, replaced)
	}
	checkReleased(t, w, false)
	if last := lastStep(got); last.Name != v1alpha1.StepTaint || last.State != v1alpha1.StepStarted || last.Reason != ReasonNodeReplaced {
		t.Errorf("last step %s %s %s %q, want Taint held with %s", last.Name, last.State, last.Reason, last.Message, ReasonNodeReplaced)
	}
}

// The fence records the Node's UID at its first look.
func TestFenceRecordsTheNodeUID(t *testing.T) {
	w := newWorld(t, "ipmi")
	w.setNode(t, func(n *corev1.Node) { n.UID = "uid-1" })
	if nf := w.run(t); nf.Status.NodeUID != "uid-1" {
		t.Errorf("status.nodeUID = %q, want uid-1", nf.Status.NodeUID)
	}
}

// A node that is not back is not unfenced, even with a confirmation.
func TestRecoveryWaitsForTheNode(t *testing.T) {
	w, _ := releasedWorld(t, nil)
	w.setNode(t, confirmedClean("alice", "wiped"))
	nf, node := w.reconcile(t)
	wantHeld(t, nf, node, ReasonNodeNotBack)
}

// A policy without automatic recovery unfences only on request.
func TestRecoveryAutomaticOff(t *testing.T) {
	off := false
	w, _ := releasedWorld(t, func(nf *v1alpha1.NodeFence) { nf.Spec.Recovery.Automatic = &off })
	w.setNode(t, back(bootAfter))
	nf, node := w.reconcile(t)
	wantHeld(t, nf, node, ReasonAutomaticRecoveryOff)
	w.setNode(t, confirmedClean("alice", "checked by hand"))
	nf, node = w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
}

// A policy whose automatic recovery is turned off while its fence is under way holds that
// fence's node too, though the fence's own copy of the policy still says automatic: the
// stricter of the two holds. A policy left automatic, or deleted, unfences the rebooted node.
func TestRecoveryAutomaticTurnedOffDuringTheFence(t *testing.T) {
	for _, tc := range []struct {
		name      string
		automatic *bool // the policy's now; nil: the policy was deleted
		want      string
	}{
		{"turned off", ptr.To(false), ReasonAutomaticRecoveryOff},
		{"left on", ptr.To(true), ""},
		{"deleted", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := releasedWorld(t, func(nf *v1alpha1.NodeFence) {
				nf.Spec.PolicyName = "db"
				nf.Spec.Recovery.Automatic = ptr.To(true)
			})
			if tc.automatic != nil {
				p := &v1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "db"}}
				p.Spec.Recovery.Automatic = tc.automatic
				if err := w.c.Create(context.Background(), p); err != nil {
					t.Fatal(err)
				}
			}
			w.setNode(t, back(bootAfter))
			nf, node := w.reconcile(t)
			if tc.want == "" {
				wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
				return
			}
			wantHeld(t, nf, node, tc.want)
			if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); c == nil || !strings.Contains(c.Message, "turned off after this fence began") {
				t.Errorf("Recovered condition %+v, want it to say the policy changed", c)
			}
			w.setNode(t, confirmedClean("alice", "checked by hand"))
			nf, node = w.reconcile(t)
			wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
		})
	}
}

// Without a boot ID from the time of the fence, a reboot cannot be proven.
func TestRecoveryBootIDUnknown(t *testing.T) {
	w := newWorld(t, "ipmi")
	w.r.Recorder = &recorder{}
	w.setNode(t, notReady) // no boot ID reported when fenced
	w.run(t)
	w.setNode(t, back(bootAfter))
	nf, node := w.reconcile(t)
	wantHeld(t, nf, node, ReasonBootIDUnknown)
}

// A node fenced again within the flap window of its last recovery is held fenced although it
// rebooted; outside the window, or with the window off, it is unfenced.
func TestRecoveryFlapping(t *testing.T) {
	zero := metav1.Duration{}
	for _, tt := range []struct {
		name   string
		since  time.Duration // from the previous recovery to this fence's creation
		window *metav1.Duration
		held   bool
	}{
		{"fenced again 10m after its recovery", 10 * time.Minute, nil, true},
		{"fenced again 2h after its recovery", 2 * time.Hour, nil, false},
		{"fenced again 10m after, window 5m", 10 * time.Minute, &metav1.Duration{Duration: 5 * time.Minute}, false},
		{"fenced again 10m after, window off", 10 * time.Minute, &zero, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := releasedWorld(t, func(nf *v1alpha1.NodeFence) {
				prev := metav1.NewTime(nf.CreationTimestamp.Add(-tt.since))
				nf.Spec.PreviousRecoveryTime, nf.Spec.Recovery.FlapWindow = &prev, tt.window
			})
			w.setNode(t, back(bootAfter))
			nf, node := w.reconcile(t)
			if !tt.held {
				wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
				return
			}
			wantHeld(t, nf, node, ReasonFlapping)
			w.setNode(t, confirmedClean("alice", "replaced its PSU"))
			nf, node = w.reconcile(t)
			wantRecovered(t, nf, node, v1alpha1.RecoveryConfirmedClean)
		})
	}
}

// A recovery lifts the storage fences before the taint goes, with a fresh token, and lets go
// of the lift finalizer; while the storage has not lifted, the node stays tainted.
func TestRecoveryLiftsStorageFences(t *testing.T) {
	s := &storage{answers: []providers.Status{{State: providers.InProgress, Message: "lifting"}, {State: providers.Confirmed, Message: "unfenced"}}}
	w, _ := storageWorld(t, s, storageMethod)
	w.setNode(t, back(bootAtFence))
	w.setNode(t, notReady)
	if nf := w.run(t); nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("fence ended %s", nf.Status.Phase)
	}
	w.setNode(t, back(bootAfter))
	nf, node := w.reconcile(t)
	if nf.Status.Phase != v1alpha1.PhaseReleased || !tainted(node) || s.lifts != 1 {
		t.Fatalf("while the storage lifts: phase %s, tainted %v, lifts %d; want Released, tainted, 1", nf.Status.Phase, tainted(node), s.lifts)
	}
	if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); c == nil || c.Reason != ReasonLifting {
		t.Errorf("Recovered condition %+v, want False/%s", c, ReasonLifting)
	}
	nf, node = w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
	if s.lifts != 2 || controllerutil.ContainsFinalizer(nf, v1alpha1.FinalizerLiftStorageFence) {
		t.Errorf("lifts %d, finalizer kept %v: want 2 and gone", s.lifts, controllerutil.ContainsFinalizer(nf, v1alpha1.FinalizerLiftStorageFence))
	}
}

// A power-on the BMC refuses for a reason only a person can change (its credentials) is tried
// again after ten minutes, not every 30 s: a BMC counts failed logins, and many lock the
// account out after a few. The hold says so, with the provider's hint; an unreachable BMC is
// tried again every 30 s.
func TestRefusedPowerOnIsNotHammered(t *testing.T) {
	for _, tc := range []struct {
		err   error
		retry time.Duration
	}{
		{providers.WithHint(providers.NewError(providers.ReasonAuthFailed, errors.New("IPMI: authentication failed")), "check the BMC credentials Secret"), retryPowerOnRefused},
		{providers.NewError(providers.ReasonUnreachable, errors.New("BMC unreachable")), retryPowerOn},
	} {
		t.Run(string(providers.ReasonOf(tc.err)), func(t *testing.T) {
			w, _ := releasedWorld(t, func(nf *v1alpha1.NodeFence) { nf.Spec.Recovery.PowerOn = true })
			w.power.InjectError(fake.MethodRestorePower, tc.err)
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
			res, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.retry {
				t.Errorf("a power-on failed with %v is tried again after %s, want %s", tc.err, res.RequeueAfter, tc.retry)
			}
			nf := &v1alpha1.NodeFence{}
			if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered)
			if c == nil || c.Reason != ReasonPowerOnFailed || !strings.Contains(c.Message, "tried again every "+tc.retry.String()) || !strings.Contains(c.Message, providers.HintOf(tc.err)) {
				t.Errorf("Recovered %+v: want PowerOnFailed saying when it is tried again and the provider's hint", c)
			}
		})
	}
}

// recovery.powerOn powers the machine back on through the method that fenced it, once, after
// the release; a failed power-on is said and tried again; the node is unfenced only once it is
// back with a new boot ID.
func TestRecoveryPowersOn(t *testing.T) {
	w, rec := releasedWorld(t, func(nf *v1alpha1.NodeFence) { nf.Spec.Recovery.PowerOn = true })
	w.power.InjectError(fake.MethodRestorePower, providers.NewError(providers.ReasonUnreachable, errors.New("BMC unreachable")))
	nf, node := w.reconcile(t)
	wantHeld(t, nf, node, ReasonPowerOnFailed)
	if nf.Status.PowerRestoredTime != nil || !w.power.Fenced("n1") {
		t.Fatalf("a failed power-on recorded as done (%v) or the machine on", nf.Status.PowerRestoredTime)
	}
	nf, node = w.reconcile(t)
	if nf.Status.PowerRestoredTime == nil || w.power.Fenced("n1") {
		t.Fatalf("powered on %v, machine off %v: want the power-on done", nf.Status.PowerRestoredTime, w.power.Fenced("n1"))
	}
	if !tainted(node) || nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatal("the node was unfenced by the power-on alone, before it came back rebooted")
	}
	w.reconcile(t)
	if n := w.power.CallCount(fake.MethodRestorePower, "n1"); n != 2 {
		t.Errorf("RestorePower called %d times, want 2 (one failed, one done, then never again)", n)
	}
	w.setNode(t, back(bootAfter))
	nf, node = w.reconcile(t)
	wantRecovered(t, nf, node, v1alpha1.RecoveryRebooted)
	var powered bool
	for _, e := range rec.recorded() {
		powered = powered || e.Reason == ReasonPoweredOn
	}
	if !powered {
		t.Error("no PoweredOn event")
	}
}

// recovery.powerOn powers the machine on through the power method of a level that also holds a
// storage fence, though status.method names the storage fence.
func TestRecoveryPowersOnThroughALevel(t *testing.T) {
	w, _, _ := releasedPowerAndStorageWorld(t, func(nf *v1alpha1.NodeFence) { nf.Spec.Recovery.PowerOn = true })
	nf, node := w.reconcile(t)
	if nf.Status.PowerRestoredTime == nil || w.power.Fenced("n1") || w.power.CallCount(fake.MethodRestorePower, "n1") != 1 {
		t.Fatalf("powered on at %v, machine off %v, RestorePower called %d times: want one power-on through ipmi",
			nf.Status.PowerRestoredTime, w.power.Fenced("n1"), w.power.CallCount(fake.MethodRestorePower, "n1"))
	}
	wantHeld(t, nf, node, ReasonNodeNotBack) // powered on, not back yet
}

// A power-on that keeps failing (the BMC gone for good) does not hold the node once it is back
// and clean another way: powered on by hand and rebooted, or confirmed clean by an operator.
func TestRecoveryWithoutThePowerOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*corev1.Node)
		how  v1alpha1.RecoveryHow
	}{
		{"rebooted by hand", back(bootAfter), v1alpha1.RecoveryRebooted},
		{"confirmed clean", func(n *corev1.Node) { back(bootAtFence)(n); confirmedClean("alice", "BMC replaced, disks checked")(n) }, v1alpha1.RecoveryConfirmedClean},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := releasedWorld(t, func(nf *v1alpha1.NodeFence) { nf.Spec.Recovery.PowerOn = true })
			for range 2 { // the BMC is gone: every power-on fails
				w.power.InjectError(fake.MethodRestorePower, providers.NewError(providers.ReasonUnreachable, errors.New("BMC unreachable")))
			}
			nf, node := w.reconcile(t)
			wantHeld(t, nf, node, ReasonPowerOnFailed)
			w.setNode(t, tc.edit)
			nf, node = w.reconcile(t)
			wantRecovered(t, nf, node, tc.how)
			if n := w.power.CallCount(fake.MethodRestorePower, "n1"); n != 2 || nf.Status.PowerRestoredTime != nil {
				t.Errorf("RestorePower called %d times (want 2, both failed), power restored at %v (want never)", n, nf.Status.PowerRestoredTime)
			}
		})
	}
}

// The reconcile that releases a fence brings it back at once for its recovery: a powered-off
// node may never change again, and no Node event would then start the power-on
// (recovery.powerOn) or say why the node stays fenced. Found on real machines, where the last
// change of the dead node came in the same second as the release.
func TestReleaseRequeuesForRecovery(t *testing.T) {
	w := newWorld(t, "ipmi")
	nf := &v1alpha1.NodeFence{}
	ctx := context.Background()
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	nf.Spec.Recovery.PowerOn = true
	if err := w.c.Update(ctx, nf); err != nil {
		t.Fatal(err)
	}
	w.setNode(t, notReady)
	var res ctrl.Result
	for range 60 {
		var err error
		if res, err = w.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
			t.Fatal(err)
		}
		if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
			t.Fatal(err)
		}
		if nf.Status.Phase == v1alpha1.PhaseReleased {
			break
		}
		w.now = w.now.Add(time.Second)
	}
	if nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("fence ended %s, want Released", nf.Status.Phase)
	}
	if res.RequeueAfter <= 0 {
		t.Fatalf("the releasing reconcile returned %+v: nothing brings the fence back for its recovery", res)
	}
	w.reconcile(t)
	if n := w.power.CallCount(fake.MethodRestorePower, "n1"); n != 1 {
		t.Errorf("RestorePower called %d times after the requeue, want 1", n)
	}
}

// Without recovery.powerOn, the machine stays off.
func TestRecoveryLeavesThePowerOff(t *testing.T) {
	w, _ := releasedWorld(t, nil)
	w.reconcile(t)
	if n := w.power.CallCount(fake.MethodRestorePower, ""); n != 0 || !w.power.Fenced("n1") {
		t.Errorf("RestorePower called %d times without recovery.powerOn", n)
	}
}

// The SRE's metrics follow a fence: in progress while it runs, then released and held by
// reason, gone once recovered; the stage histograms observe each released fence once.
func TestFenceMetrics(t *testing.T) {
	fenceStates = &stateCollector{nodes: map[string]fenceState{}}
	confirms := func() uint64 { return histogramCount(t, fenceConfirmSeconds, "ipmi", "Detected") }
	releases := func() uint64 { return histogramCount(t, fenceReleaseSeconds, "ipmi", "Detected") }
	recoveries := func() uint64 { return histogramCount(t, fenceRecoverySeconds, "Rebooted") }
	c0, r0, rec0 := confirms(), releases(), recoveries()
	w := newWorld(t, "ipmi")
	w.r.Recorder = &recorder{}
	w.setNode(t, back(bootAtFence))
	w.tick = func(nf *v1alpha1.NodeFence) {
		if nf.Status.Phase != "" && nf.Status.Phase != v1alpha1.PhaseReleased {
			if got := gauge(t, "palisade_fences_in_progress", ""); got != 1 {
				t.Errorf("fences in progress %v while the fence is %s, want 1", got, nf.Status.Phase)
			}
		}
	}
	w.setNode(t, notReady)
	w.run(t)
	w.tick = nil
	nf, _ := w.reconcile(t)
	if got := gauge(t, "palisade_fences_in_progress", ""); got != 0 {
		t.Errorf("fences in progress %v after the release, want 0", got)
	}
	if got := gauge(t, "palisade_nodes_fenced", ReasonNodeNotBack); got != 1 {
		t.Errorf("nodes fenced for %s: %v, want 1", ReasonNodeNotBack, got)
	}
	if confirms()-c0 != 1 || releases()-r0 != 1 {
		t.Errorf("confirm and release histograms observed %d and %d fences, want 1 each", confirms()-c0, releases()-r0)
	}
	if nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("phase %s", nf.Status.Phase)
	}
	w.setNode(t, back(bootAfter))
	w.reconcile(t)
	if got := gauge(t, "palisade_nodes_fenced", ReasonNodeNotBack); got != 0 {
		t.Errorf("nodes fenced %v after the recovery, want 0", got)
	}
	if recoveries()-rec0 != 1 || releases()-r0 != 1 {
		t.Errorf("recovery histogram observed %d, releases %d; want 1 and still 1", recoveries()-rec0, releases()-r0)
	}
}

// histogramCount is how many observations the histogram's series holds.
func histogramCount(t *testing.T, h *prometheus.HistogramVec, labels ...string) uint64 {
	t.Helper()
	m := &dto.Metric{}
	if err := h.WithLabelValues(labels...).(prometheus.Histogram).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// gauge is fenceStates' value of the named gauge (with reason, for palisade_nodes_fenced).
func gauge(t *testing.T, name, reason string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	fenceStates.Collect(ch)
	close(ch)
	for m := range ch {
		if !strings.Contains(m.Desc().String(), `"`+name+`"`) {
			continue
		}
		d := &dto.Metric{}
		if err := m.Write(d); err != nil {
			t.Fatal(err)
		}
		if len(d.GetLabel()) > 0 && d.GetLabel()[0].GetValue() != reason {
			continue
		}
		return d.GetGauge().GetValue()
	}
	return 0
}

// A controller that resumes with a copy of the record in which the recovery was already
// decided (a lost leader that does not know it yet) takes the taint off only when that copy is
// still the API server's record: by then the node may have been recovered and fenced again
// under the same name, and the taint it would take off, by node, is the newer fence's. With a
// storage fence the lift checks the same; without one, nothing else does.
func TestDecidedRecoveryFromAStaleCopyKeepsTheTaint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stale    bool
		replaced bool // the record is a newer fence of the node (another UID), not a later write
	}{{"current", false, false}, {"a later write", true, false}, {"a newer fence of the node", true, true}} {
		stale := tc.stale
		t.Run(tc.name, func(t *testing.T) {
			w, _ := releasedWorld(t, nil)
			ctx := context.Background()
			nf := &v1alpha1.NodeFence{}
			if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
				t.Fatal(err)
			}
			nf.Status.Recovery = &v1alpha1.RecoveryRecord{How: v1alpha1.RecoveryRebooted, Reason: "boot ID changed"}
			if err := w.c.Status().Update(ctx, nf); err != nil {
				t.Fatal(err)
			}
			held := nf.DeepCopy()
			switch {
			case tc.replaced:
				// Recovered, then the node fenced again: a new NodeFence under the same name.
				if err := w.c.Delete(ctx, nf); err != nil {
					t.Fatal(err)
				}
				again := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "fence-uid-2"}, Spec: nf.Spec}
				if err := w.c.Create(ctx, again); err != nil {
					t.Fatal(err)
				}
			case stale:
				// The record moves on under the held copy (here: the live leader's write).
				nf.Status.Conditions = append(nf.Status.Conditions, metav1.Condition{Type: "Seen", Status: metav1.ConditionTrue, Reason: "ByTheLeader", LastTransitionTime: metav1.Now()})
				if err := w.c.Status().Update(ctx, nf); err != nil {
					t.Fatal(err)
				}
			}
			w.setNode(t, back(bootAfter))
			_, err := w.r.recoverIfClean(ctx, held)
			node := &corev1.Node{}
			if gerr := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, node); gerr != nil {
				t.Fatal(gerr)
			}
			if stale {
				if err == nil || !strings.Contains(err.Error(), "may be stale") || !OutOfService(node) {
					t.Errorf("from a stale copy: error %v, tainted %t; want an error saying why and the taint kept", err, OutOfService(node))
				}
				return
			}
			if err != nil || OutOfService(node) {
				t.Errorf("from the current record: error %v, tainted %t; want the node unfenced", err, OutOfService(node))
			}
		})
	}
}

// recovery.powerOn goes by node: from a copy of the record that is no longer the API server's
// (a lost leader resuming after the node was recovered and fenced again), nothing is powered
// on, or the machine of the newer fence would boot.
func TestPowerOnFromAStaleCopy(t *testing.T) {
	w, _ := releasedWorld(t, func(nf *v1alpha1.NodeFence) { nf.Spec.Recovery.PowerOn = true })
	ctx := context.Background()
	held := &v1alpha1.NodeFence{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, held); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Delete(ctx, held.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	again := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "fence-uid-2"}, Spec: held.Spec}
	if err := w.c.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	if _, err := w.r.recoverIfClean(ctx, held); err == nil || !strings.Contains(err.Error(), "may be stale") {
		t.Errorf("recoverIfClean from a stale copy = %v, want an error saying why", err)
	}
	if n := w.power.CallCount(fake.MethodRestorePower, "n1"); n != 0 {
		t.Errorf("RestorePower called %d times from a stale copy, want none", n)
	}
}
