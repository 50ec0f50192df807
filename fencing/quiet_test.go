package fencing

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// A pass of the verify window that sees nothing new is not written to the record; a pass that
// changes it (the baseline, a longer window) and the step's end are. The step's attempts still
// count every pass, a refused write included.
func TestQuietPassesAreCountedNotWritten(t *testing.T) {
	tests := []struct {
		name string
		// kubeletBack: the agent's heartbeats see the kubelet healthy again this long after the
		// confirmation (0: never), which makes the Executor's window longer.
		kubeletBack time.Duration
		// refuseEnd refuses the first write of VerifyFenced's end (with Taint's start) once.
		refuseEnd bool
		// written is how many times the record is written with VerifyFenced not ended: the
		// step recorded before it is taken, then its passes that changed the record.
		written int
	}{
		{name: "nothing-new", written: 2},
		{name: "window-made-longer", kubeletBack: 2 * time.Second, written: 3},
		{name: "end-refused-once", refuseEnd: true, written: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, "executor")
			w.r.Heartbeats = heartbeats{}
			written, refused := 0, 0
			w.r.Client = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
				SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
					if nf, ok := obj.(*v1alpha1.NodeFence); ok {
						switch s := stepOf(nf, v1alpha1.StepVerifyFenced); {
						case s.Name == "":
						case s.State == v1alpha1.StepStarted:
							written++
						case tt.refuseEnd && refused == 0:
							refused++
							return apierrors.NewConflict(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "nodefences"}, nf.Name, errors.New("the object has been modified"))
						}
					}
					return c.SubResource(sub).Update(ctx, obj, opts...)
				},
			})
			ctx := context.Background()
			nf := &v1alpha1.NodeFence{}
			passes := 0
			for range 400 { // a kubelet healthy again makes the window minutes long
				if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
					t.Fatal(err)
				}
				verifyEnded := stepOf(nf, v1alpha1.StepVerifyFenced).State == v1alpha1.StepSucceeded
				w.heartbeat(nf, tt.kubeletBack)
				_, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
				if err != nil && !apierrors.IsConflict(err) {
					t.Fatal(err)
				}
				if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
					t.Fatal(err)
				}
				if s := stepOf(nf, v1alpha1.StepVerifyFenced); s.Name != "" && !verifyEnded {
					passes++ // this reconcile took VerifyFenced once (its end refused: taken again)
				}
				if nf.Status.Phase == v1alpha1.PhaseReleased || nf.Status.Phase == v1alpha1.PhaseFailed {
					break
				}
				w.now = w.now.Add(time.Second)
			}
			if nf.Status.Phase != v1alpha1.PhaseReleased {
				t.Fatalf("phase %s, want Released", nf.Status.Phase)
			}
			if passes < 4 {
				t.Fatalf("VerifyFenced taken %d times: the window was too short to test anything", passes)
			}
			if tt.refuseEnd && refused != 1 {
				t.Fatalf("the end's write was refused %d times, want 1", refused)
			}
			if written != tt.written {
				t.Errorf("the record was written %d times during VerifyFenced's %d passes, want %d", written, passes, tt.written)
			}
			if got := stepOf(nf, v1alpha1.StepVerifyFenced).Attempts; int(got) != passes {
				t.Errorf("VerifyFenced attempts=%d on the record, taken %d times", got, passes)
			}
		})
	}
}

// heartbeat has the node's agent report a confirmed Executor order with its kubelet stopped,
// and the kubelet healthy again from back after the confirmation when back is not zero.
func (w *world) heartbeat(nf *v1alpha1.NodeFence, back time.Duration) {
	healthy := false
	if nf.Status.FencedTime != nil && back > 0 {
		healthy = w.now.Sub(afterConfirmation(nf)) >= back
	}
	zero := 0
	w.r.Heartbeats.(heartbeats)["n1"] = agentwire.Heartbeat{Node: "n1", Received: w.now, Sent: w.now, Interval: time.Second,
		RunningContainers: &zero, KubeletHealthy: healthy,
		Executor: &agentwire.ExecutorStatus{ID: "fence-uid/executor", State: agentwire.ExecutorConfirmed, KubeletStopped: true}}
}

// Passes counted for a fence are not added to another fence made later under its name.
func TestQuietPassesBelongToOneFence(t *testing.T) {
	var q fenceMemory
	first := &v1alpha1.NodeFence{}
	first.Name, first.UID = "n1", "uid-1"
	q.addPasses(first, 3)
	q.addPasses(first, 2)
	second := first.DeepCopy()
	second.UID = "uid-2"
	if got := q.takePasses(second); got != 0 {
		t.Errorf("a new fence under the same name took %d passes of the old one", got)
	}
	q.addPasses(first, 5)
	q.forget("n1")
	if got := q.takePasses(first); got != 0 {
		t.Errorf("took %d passes after the fence was forgotten", got)
	}
	q.addPasses(first, 4)
	if got, again := q.takePasses(first), q.takePasses(first); got != 4 || again != 0 {
		t.Errorf("took %d then %d, want 4 then 0", got, again)
	}
}

// A release step that waits — ReleaseAttachments for the attacher of a node the Executor left
// running, which fails to detach for two minutes — is written when it starts and when its
// record changes, not once a second: its passes are counted, and it still says StepRetrying
// every tenth pass.
func TestWaitingReleaseStepIsNotWrittenEverySecond(t *testing.T) {
	w := newWorld(t, "executor")
	attacherHolds(t, w)
	written := 0
	w.r.Client = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if nf, ok := obj.(*v1alpha1.NodeFence); ok && stepOf(nf, v1alpha1.StepReleaseAttachments).State == v1alpha1.StepStarted {
				written++
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	rec := &recorder{}
	w.r.Recorder = rec
	w.ticks = 120
	nf, ended := w.advance(t)
	s := stepOf(nf, v1alpha1.StepReleaseAttachments)
	if ended || s.State != v1alpha1.StepStarted {
		t.Fatalf("phase %s, ReleaseAttachments %s: want it waiting for the attacher\n%s", nf.Status.Phase, s.State, goldenTrace(nf))
	}
	passes := w.r.memory.addPasses(nf, 0) + s.Attempts
	if written > 3 || passes < 60 {
		t.Errorf("ReleaseAttachments written %d times in %d passes, want at most 3 (its start, its first pass' message)", written, passes)
	}
	retrying := 0
	for _, m := range rec.said(ReasonStepRetrying) {
		if strings.HasPrefix(m, string(v1alpha1.StepReleaseAttachments)+":") {
			retrying++
		}
	}
	t.Logf("ReleaseAttachments: %d passes, %d writes, %d StepRetrying events", passes, written, retrying)
	if want := int(passes)/10 + 1; retrying < want-1 || retrying > want {
		t.Errorf("%d StepRetrying events for ReleaseAttachments in %d passes, want %d (the first, then every tenth)", retrying, passes, want)
	}
}
