package fencing

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/fake"
)

// storage is a storage-fence provider: fake's fence, and a lifting that answers each of
// answers in turn (the last again once they run out). It notes whether the NodeFence held the
// lift finalizer when its fence was first started.
type storage struct {
	*fake.Provider
	c              client.Reader
	answers        []providers.Status
	lifts          int
	fenceCalls     int
	heldAtFirstCmd bool
	liftTokens     []int64 // each lift's token
	unrecorded     int     // lifts whose token the stored NodeFence did not hold when sent
}

func (s *storage) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	if s.fenceCalls++; s.fenceCalls == 1 {
		nf := &v1alpha1.NodeFence{}
		if err := s.c.Get(ctx, client.ObjectKey{Name: req.Fence.Name}, nf); err == nil {
			s.heldAtFirstCmd = controllerutil.ContainsFinalizer(nf, v1alpha1.FinalizerLiftStorageFence)
		}
	}
	return s.Provider.Fence(ctx, req)
}

func (s *storage) Unfence(_ context.Context, req providers.Request) (providers.Status, error) {
	if req.LiftToken <= req.Fence.Status.Token {
		return providers.Status{}, fmt.Errorf("lift token %d is not newer than the fence's %d", req.LiftToken, req.Fence.Status.Token)
	}
	nf := &v1alpha1.NodeFence{}
	if err := s.c.Get(context.Background(), client.ObjectKey{Name: req.Fence.Name}, nf); err != nil || nf.Status.LiftToken != req.LiftToken {
		s.unrecorded++
	}
	s.liftTokens = append(s.liftTokens, req.LiftToken)
	i := min(s.lifts, len(s.answers)-1)
	s.lifts++
	return s.answers[i], nil
}

var storageMethod = v1alpha1.Method{Name: "storage", Type: v1alpha1.MethodNetworkFence, Timeout: &metav1.Duration{Duration: 10 * time.Second},
	NetworkFence: &v1alpha1.NetworkFenceMethod{NetworkFenceClassName: "nfc"}}

// storageWorld is a world whose chain is methods, the storage fence served by s.
func storageWorld(t *testing.T, s *storage, methods ...v1alpha1.Method) (*world, *recorder) {
	t.Helper()
	w := newWorld(t, "ipmi")
	setMethods(t, w, methods...)
	s.Provider, s.c = fake.NewNamed("networkfence"), w.c
	w.r.Fencers[v1alpha1.MethodNetworkFence] = s
	rec := &recorder{}
	w.r.Recorder = rec
	return w, rec
}

// deleteFence deletes the world's NodeFence and reconciles it n times, a second apart; it
// returns the NodeFence as it then stands (nil once gone).
func (w *world) deleteFence(t *testing.T, n int) *v1alpha1.NodeFence {
	t.Helper()
	ctx := context.Background()
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if err := w.c.Delete(ctx, nf); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return w.reconcileDeleted(t, n)
}

func (w *world) reconcileDeleted(t *testing.T, n int) *v1alpha1.NodeFence {
	t.Helper()
	ctx := context.Background()
	for range n {
		if _, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
			t.Fatal(err)
		}
		w.now = w.now.Add(time.Second)
	}
	nf := &v1alpha1.NodeFence{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return nf
}

func (w *world) removeTaint(t *testing.T) {
	t.Helper()
	node := &corev1.Node{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = nil
	if err := w.c.Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
}

func reasonsOf(rec *recorder) []string {
	var out []string
	for _, e := range rec.recorded() {
		out = append(out, e.Reason)
	}
	return out
}

// TestStorageFenceLiftedOnlyAfterRepair: a storage fence's NodeFence holds the lift finalizer
// from before the fence's first command; deleting the released fence lifts nothing while the
// node carries the out-of-service taint (the condition and an event say what to do), lifts it
// once the taint is gone, and lets the NodeFence go only once the provider reads it lifted.
func TestStorageFenceLiftedOnlyAfterRepair(t *testing.T) {
	lifting := providers.Status{State: providers.InProgress, Message: "NetworkFence set Unfenced"}
	s := &storage{answers: []providers.Status{lifting, lifting, {State: providers.Confirmed, Message: "no NetworkFence is left"}}}
	w, rec := storageWorld(t, s, storageMethod)
	nf := w.run(t)
	checkGolden(t, "storage-fence", goldenTrace(nf))
	checkReleased(t, w, true)
	if !s.heldAtFirstCmd {
		t.Error("the storage fence's first command was sent before the NodeFence held the finalizer " + v1alpha1.FinalizerLiftStorageFence)
	}

	nf = w.deleteFence(t, 5)
	if nf == nil {
		t.Fatal("the NodeFence went while the node still carries the out-of-service taint: the storage fence was dropped unlifted")
	}
	if s.lifts != 0 {
		t.Errorf("the storage fence was lifted %d times while the node carries the out-of-service taint", s.lifts)
	}
	c := meta.FindStatusCondition(nf.Status.Conditions, ConditionStorageFenceLifted)
	if c == nil || c.Reason != ReasonAwaitingNodeRepair {
		t.Fatalf("condition %s = %+v, want reason %s", ConditionStorageFenceLifted, c, ReasonAwaitingNodeRepair)
	}
	if n := countOfReason(rec, ReasonAwaitingNodeRepair); n != 1 {
		t.Errorf("%d events %s over 5 reconciles, want 1 (once per change)", n, ReasonAwaitingNodeRepair)
	}

	w.removeTaint(t)
	if nf = w.reconcileDeleted(t, 2); nf == nil {
		t.Fatalf("the NodeFence went before the provider read the fence lifted (%d lifts)", s.lifts)
	}
	if got := meta.FindStatusCondition(nf.Status.Conditions, ConditionStorageFenceLifted); got == nil || got.Reason != ReasonLifting {
		t.Errorf("condition while lifting = %+v, want reason %s", got, ReasonLifting)
	}
	if nf = w.reconcileDeleted(t, 1); nf != nil {
		t.Fatalf("the NodeFence stays after the fence was read lifted: %+v", nf.Status.Conditions)
	}
	if s.lifts != 3 {
		t.Errorf("%d lifts, want 3", s.lifts)
	}
	// One lift token, recorded before the first lift and carried by every retry.
	if s.unrecorded != 0 || len(s.liftTokens) != 3 || s.liftTokens[0] != s.liftTokens[1] || s.liftTokens[1] != s.liftTokens[2] {
		t.Errorf("lift tokens %v, %d sent before the NodeFence recorded them: want one token, recorded before the first lift", s.liftTokens, s.unrecorded)
	}
	if !slices.Contains(reasonsOf(rec), ReasonStorageFenceLifted) {
		t.Errorf("no %s event: %v", ReasonStorageFenceLifted, reasonsOf(rec))
	}
}

// releasedUntainted is a storage world whose fence was released and whose taint is gone, and
// the NodeFence as read then.
func releasedUntainted(t *testing.T, s *storage) (*world, *v1alpha1.NodeFence) {
	t.Helper()
	w, _ := storageWorld(t, s, storageMethod)
	w.run(t)
	w.removeTaint(t)
	nf := &v1alpha1.NodeFence{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	return w, nf
}

// TestStaleCopyLiftsNothing: a controller that reads a released fence, stalls (a lost leader
// that does not know it yet) and resumes after the record moved on cannot record a lift token
// on its stale copy, so it sends no lift: the lift of a storage fence is addressed by node, and
// a fresh token would outrank a newer fence of the same node.
func TestStaleCopyLiftsNothing(t *testing.T) {
	s := &storage{answers: []providers.Status{{State: providers.Confirmed, Message: "lifted"}}}
	w, stale := releasedUntainted(t, s)
	ctx := context.Background()
	// The record moves on under it (here: the live leader's write of the same fence).
	fresh := stale.DeepCopy()
	fresh.Status.Conditions = append(fresh.Status.Conditions, metav1.Condition{Type: "Seen", Status: metav1.ConditionTrue, Reason: "ByTheLeader", LastTransitionTime: metav1.Now()})
	if err := w.c.Status().Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if _, wait := w.r.lift(ctx, stale); wait == nil || wait.reason != ReasonAPIError {
		t.Fatalf("lift from a stale copy = %+v, want a wait with reason %s", wait, ReasonAPIError)
	}
	if s.lifts != 0 {
		t.Errorf("%d lifts sent from a stale copy of the record (tokens %v), want none", s.lifts, s.liftTokens)
	}
}

// A copy of the record that already holds its lift token (a lift was sent, not yet confirmed)
// but is no longer the record (the fence went on under a live leader, or the NodeFence is
// another object now) sends no lift: with a token on record, only the record's own version may.
func TestStaleCopyWithATokenLiftsNothing(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		t.Run(fmt.Sprintf("replaced=%v", replaced), func(t *testing.T) {
			s := &storage{answers: []providers.Status{{State: providers.InProgress, Message: "lifting"}}}
			w, stale := releasedUntainted(t, s)
			ctx := context.Background()
			if _, wait := w.r.lift(ctx, stale); wait == nil || wait.reason != ReasonLifting || s.lifts != 1 || stale.Status.LiftToken == 0 {
				t.Fatalf("first lift: wait %+v, %d lifts, token %d; want one lift sent, the token recorded, waiting", wait, s.lifts, stale.Status.LiftToken)
			}
			fresh := &v1alpha1.NodeFence{}
			if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, fresh); err != nil {
				t.Fatal(err)
			}
			if replaced {
				// Recovered, then the node fenced again: a new NodeFence under the same name.
				fresh.Finalizers = nil
				if err := w.c.Update(ctx, fresh); err != nil {
					t.Fatal(err)
				}
				if err := w.c.Delete(ctx, fresh); err != nil {
					t.Fatal(err)
				}
				again := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "fence-uid-2"}, Spec: fresh.Spec}
				if err := w.c.Create(ctx, again); err != nil {
					t.Fatal(err)
				}
			} else {
				fresh.Status.Conditions = append(fresh.Status.Conditions, metav1.Condition{Type: "Seen", Status: metav1.ConditionTrue, Reason: "ByTheLeader", LastTransitionTime: metav1.Now()})
				if err := w.c.Status().Update(ctx, fresh); err != nil {
					t.Fatal(err)
				}
			}
			if _, wait := w.r.lift(ctx, stale); wait == nil || wait.reason != ReasonAPIError || !strings.Contains(wait.msg, "may be stale") {
				t.Fatalf("lift from a stale copy = %+v, want a wait with reason %s saying why", wait, ReasonAPIError)
			}
			if s.lifts != 1 {
				t.Errorf("%d lifts sent (tokens %v), want only the first: none from the stale copy", s.lifts, s.liftTokens)
			}
		})
	}
}

func countOfReason(rec *recorder, reason string) int {
	n := 0
	for _, r := range reasonsOf(rec) {
		if r == reason {
			n++
		}
	}
	return n
}

// TestStorageFenceKeptForAGoneNode: a node that no longer exists keeps its storage fence (its
// machine may still run with its addresses): the NodeFence goes, nothing is lifted, and a
// warning says so.
func TestStorageFenceKeptForAGoneNode(t *testing.T) {
	s := &storage{answers: []providers.Status{{State: providers.Confirmed}}}
	w, rec := storageWorld(t, s, storageMethod)
	w.run(t)
	if err := w.c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	checkStorageFenceKept(t, w, s, rec, "a gone node")
}

// A node being deleted is as good as gone: its deletion starts a new fence, which replaces
// this one (a Released fence whose taint someone took off no longer covers the node), and
// nobody found its machine clean. Its storage fence stays, though the node no longer carries
// the taint.
func TestStorageFenceKeptForANodeBeingDeleted(t *testing.T) {
	s := &storage{answers: []providers.Status{{State: providers.Confirmed}}}
	w, rec := storageWorld(t, s, storageMethod)
	w.run(t)
	ctx := context.Background()
	node := &corev1.Node{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints, node.Finalizers = nil, []string{v1alpha1.FinalizerFenceOnDelete}
	if err := w.c.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	checkStorageFenceKept(t, w, s, rec, "a node being deleted")
}

// A Node registered anew under the fenced one's name (another UID), without the taint, is not
// the fenced machine repaired: deleting the NodeFence keeps its storage fence, as for a gone
// node (before, the missing taint read as "repaired" and the fence was lifted).
func TestStorageFenceKeptForANodeRegisteredAnew(t *testing.T) {
	s := &storage{answers: []providers.Status{{State: providers.Confirmed}}}
	w, rec := storageWorld(t, s, storageMethod)
	w.setNode(t, func(n *corev1.Node) { n.UID = "uid-fenced" })
	w.run(t)
	w.setNode(t, func(n *corev1.Node) { n.UID, n.Spec.Taints = "uid-registered-anew", nil })
	checkStorageFenceKept(t, w, s, rec, "a node registered anew")
}

// TestFailedStorageFenceLiftedAtOnce: a fence that released nothing (its storage fence never
// confirmed, the node never tainted) is lifted as soon as its NodeFence is deleted, so that
// the node is not left cut off from its storage by a fence that did not count.
func TestFailedStorageFenceLiftedAtOnce(t *testing.T) {
	s := &storage{answers: []providers.Status{{State: providers.Confirmed, Message: "lifted"}}}
	w, _ := storageWorld(t, s, storageMethod)
	s.SetIgnoreFence(true) // the storage never reads the fence in place
	nf := w.run(t)
	if nf.Status.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("phase %s, want Failed", nf.Status.Phase)
	}
	checkReleased(t, w, false)
	if nf = w.deleteFence(t, 1); nf != nil {
		t.Fatalf("the NodeFence stays: %+v", nf.Status.Conditions)
	}
	if s.lifts != 1 {
		t.Errorf("%d lifts, want 1", s.lifts)
	}
}

// TestStorageFenceKeptAfterAReleaseTheNodeDisproved: a fence whose release began and whose node
// then showed life (Palisade took the taint back) keeps its storage fence when its NodeFence is
// deleted, whatever its phase (failed, or escalating to its next method) and whatever its
// counters say (a crash may leave them short): the missing taint is no repair, and the storage
// fence may be all that keeps the original from writing beside its replacement. So does a
// release without the taint. The NodeFence goes with a warning. A Taint that succeeded after
// the sign of life gives the decision back to the taint's removal.
func TestStorageFenceKeptAfterAReleaseTheNodeDisproved(t *testing.T) {
	alive := func(step v1alpha1.StepName) v1alpha1.Step {
		return v1alpha1.Step{Name: step, State: v1alpha1.StepFailed, Reason: v1alpha1.ReasonNodeAliveAfterFence, Attempts: 1}
	}
	// before drops the record's release steps, as if the node had shown life before any.
	before := func(nf *v1alpha1.NodeFence) {
		nf.Status.Steps = slices.DeleteFunc(nf.Status.Steps, func(s v1alpha1.Step) bool { return releaseStep(s.Name) })
	}
	for _, tc := range []struct {
		name string
		edit func(*v1alpha1.NodeFence)
		kept bool
	}{
		{"failed after force-deleting pods", func(nf *v1alpha1.NodeFence) {
			nf.Status.Phase, nf.Status.PodsDeleted = v1alpha1.PhaseFailed, 2
			nf.Status.Steps = append(nf.Status.Steps, alive(v1alpha1.StepReleaseAttachments))
		}, true},
		{"failed, its counters short after a crash", func(nf *v1alpha1.NodeFence) {
			nf.Status.Phase, nf.Status.PodsDeleted, nf.Status.AttachmentsReleased = v1alpha1.PhaseFailed, 0, 0
			nf.Status.Steps = append(nf.Status.Steps, alive(v1alpha1.StepDeletePods))
		}, true},
		{"escalating to its next method", func(nf *v1alpha1.NodeFence) {
			nf.Status.Phase = v1alpha1.PhaseFencing
			nf.Status.Steps = append(nf.Status.Steps, alive(v1alpha1.StepReleaseAttachments),
				v1alpha1.Step{Name: v1alpha1.StepPowerOff, Method: "ipmi", State: v1alpha1.StepStarted, Reason: "BMCUnreachable"})
		}, true},
		{"released without the taint", func(nf *v1alpha1.NodeFence) {
			nf.Status.Steps = slices.DeleteFunc(nf.Status.Steps, func(s v1alpha1.Step) bool { return s.Name == v1alpha1.StepTaint })
		}, true},
		{"life seen at the Taint step's first attempt, before it acted", func(nf *v1alpha1.NodeFence) {
			before(nf)
			nf.Status.Phase = v1alpha1.PhaseFailed
			nf.Status.Steps = append(nf.Status.Steps, alive(v1alpha1.StepTaint))
		}, false},
		{"life seen at the Taint step's second attempt: the first may have tainted", func(nf *v1alpha1.NodeFence) {
			before(nf)
			nf.Status.Phase = v1alpha1.PhaseFailed
			step := alive(v1alpha1.StepTaint)
			step.Attempts = 2
			nf.Status.Steps = append(nf.Status.Steps, step)
		}, true},
		{"a release step recorded and not known to have ended (a crash as it acted)", func(nf *v1alpha1.NodeFence) {
			before(nf)
			nf.Status.Phase = v1alpha1.PhaseFailed
			nf.Status.Steps = append(nf.Status.Steps, v1alpha1.Step{Name: v1alpha1.StepDeletePods, State: v1alpha1.StepStarted})
		}, true},
		{"tainted again after the sign of life, by the next method's release", func(nf *v1alpha1.NodeFence) {
			nf.Status.Steps = append(nf.Status.Steps, alive(v1alpha1.StepReleaseAttachments),
				v1alpha1.Step{Name: v1alpha1.StepConfirmOff, Method: "ipmi", State: v1alpha1.StepSucceeded},
				v1alpha1.Step{Name: v1alpha1.StepTaint, State: v1alpha1.StepSucceeded})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &storage{answers: []providers.Status{{State: providers.Confirmed}}}
			w, rec := storageWorld(t, s, storageMethod)
			nf := w.run(t)
			tc.edit(nf)
			if err := w.c.Status().Update(context.Background(), nf); err != nil {
				t.Fatal(err)
			}
			w.removeTaint(t)
			if tc.kept {
				checkStorageFenceKept(t, w, s, rec, "a node "+tc.name)
				return
			}
			if nf := w.deleteFence(t, 1); nf != nil || s.lifts != 1 {
				t.Errorf("NodeFence %v, %d lifts: want it gone and its storage fence lifted once the taint was removed", nf, s.lifts)
			}
		})
	}
}

// TestStorageFenceKeptAfterAResumedReleaseStepTheNodeDisproved: a release step recorded as
// begun by a controller that then died (it may have force-deleted pods before recording so) and
// resumed by a new one that finds the node alive at once counts as having acted: its NodeFence's
// deletion keeps the storage fence. Were the sign of life read as found before the step did
// anything, the storage fence would be lifted while the original runs beside its replacement.
func TestStorageFenceKeptAfterAResumedReleaseStepTheNodeDisproved(t *testing.T) {
	s := &storage{answers: []providers.Status{{State: providers.Confirmed}}}
	w, rec := storageWorld(t, s, storageMethod)
	nf := w.run(t)
	// As the dead controller left it: released without the taint (release.outOfServiceTaint
	// off), DeletePods begun and nothing after it on record.
	i := slices.IndexFunc(nf.Status.Steps, func(s v1alpha1.Step) bool { return s.Name == v1alpha1.StepDeletePods })
	if i < 0 {
		t.Fatalf("no DeletePods step in %+v", nf.Status.Steps)
	}
	nf.Status.Steps = slices.DeleteFunc(nf.Status.Steps[:i+1], func(s v1alpha1.Step) bool { return s.Name == v1alpha1.StepTaint })
	last := &nf.Status.Steps[len(nf.Status.Steps)-1]
	last.State, last.Attempts, last.EndTime, last.Reason, last.Message = v1alpha1.StepStarted, 0, nil, "", ""
	nf.Status.Phase, nf.Status.ReleasedTime, nf.Status.PodsDeleted = v1alpha1.PhaseReleasing, nil, 0
	nf.Status.Conditions = nil
	if err := w.c.Status().Update(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	w.r.memory = fenceMemory{} // a new leader
	w.renewLease(t)
	got, _ := w.reconcile(t)
	if d := got.Status.Steps[len(got.Status.Steps)-1]; d.Name != v1alpha1.StepDeletePods || !disproved(d) {
		t.Fatalf("last step %+v, want DeletePods failed as the node showed life", d)
	}
	w.removeTaint(t)
	checkStorageFenceKept(t, w, s, rec, "a node alive when a new leader resumed its release")
}

// checkStorageFenceKept deletes the NodeFence and checks that it goes at once, its storage
// fence not lifted, with a StorageFenceKept event; whose names the node in failures.
func checkStorageFenceKept(t *testing.T, w *world, s *storage, rec *recorder, whose string) {
	t.Helper()
	if nf := w.deleteFence(t, 1); nf != nil {
		t.Fatalf("the NodeFence of %s stays: %+v", whose, nf.Status.Conditions)
	}
	if s.lifts != 0 {
		t.Errorf("the storage fence of %s was lifted (%d calls)", whose, s.lifts)
	}
	if !slices.Contains(reasonsOf(rec), ReasonStorageFenceKept) {
		t.Errorf("no %s event: %v", ReasonStorageFenceKept, reasonsOf(rec))
	}
}

// TestPowerFenceHoldsNoFinalizer: a chain without a storage fence puts no finalizer on its
// NodeFence: deleting it (to try again) is immediate, as before.
func TestPowerFenceHoldsNoFinalizer(t *testing.T) {
	w := newWorld(t, "ipmi")
	nf := w.run(t)
	if len(nf.Finalizers) != 0 {
		t.Fatalf("finalizers %v on a power fence's NodeFence", nf.Finalizers)
	}
	if nf := w.deleteFence(t, 1); nf != nil {
		t.Fatal("the NodeFence of a power fence stays after its deletion")
	}
}

// A finalizer's removal from an object already gone is no error: there is nothing left to let
// go of (before, the NotFound became an error wrapping nil, and the reconcile was retried).
func TestLetGoOfAGoneObject(t *testing.T) {
	w := newWorld(t, "ipmi")
	ctx := context.Background()
	nf := &v1alpha1.NodeFence{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Delete(ctx, nf.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	nf.Finalizers = []string{v1alpha1.FinalizerLiftStorageFence}
	if err := w.r.letGoOfFence(ctx, nf); err != nil {
		t.Errorf("letGoOfFence of a NodeFence gone = %v, want nil", err)
	}
	node := &corev1.Node{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Delete(ctx, node.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	node.Finalizers = nil
	nr := &NodeReconciler{Client: w.c, Recorder: &recorder{}}
	if err := nr.keepFinalizer(ctx, node, &v1alpha1.FencingPolicy{}); err != nil {
		t.Errorf("keepFinalizer of a Node gone = %v, want nil", err)
	}
	node.Finalizers = []string{v1alpha1.FinalizerFenceOnDelete}
	if err := nr.letGo(ctx, node, corev1.EventTypeNormal, "node %s is gone", node.Name); err != nil {
		t.Errorf("letGo of a Node gone = %v, want nil", err)
	}
}
