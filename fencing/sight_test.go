package fencing

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/detectors/sight"
)

// fixedSight is the controller's sight frozen in one state.
type fixedSight struct{ st sight.Status }

func (f *fixedSight) Status() sight.Status { return f.st }
func (f *fixedSight) Since() time.Time     { return f.st.Since }
func (f *fixedSight) Cause() string        { return string(f.st.Cause) }

var (
	blindNow    = sight.Status{Blind: true, Cause: sight.APIUnreachable, Message: "connection refused", Since: t0.Add(-30 * time.Second), LastLost: t0.Add(-30 * time.Second)}
	seeingAgain = sight.Status{Cause: sight.APIUnreachable, Message: "connection refused", Since: t0.Add(-2 * time.Second), LastLost: t0.Add(-40 * time.Second)}
	seeingLong  = sight.Status{Cause: sight.Starting, Since: t0.Add(-time.Hour), LastLost: t0.Add(-time.Hour)}
)

// TestNodeReconcileBlind: a node whose Lease is a minute old is fenced only when the controller
// has seen for a whole lease period.
func TestNodeReconcileBlind(t *testing.T) {
	tests := []struct {
		name       string
		sight      sight.Status
		wantFence  bool
		wantEvents []eventSeen
		wantAfter  time.Duration
	}{
		{"blind: nothing fenced, said on the node", blindNow, false, []eventSeen{{"Node/n1", corev1.EventTypeWarning, ReasonControllerBlind}}, blindRecheck},
		{"sight regained 2s ago: a fresh lease period", seeingAgain, false, nil, 18*time.Second + 50*time.Millisecond},
		{"seeing for an hour: fenced", seeingLong, true, created("n1"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, _ := cluster(map[string]string{"n1": dead, "n2": healthy, "n3": healthy, "n4": healthy})
			c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, poolPolicy(ipmiMethod))...)).Build()
			rec := &recorder{}
			r := &NodeReconciler{Client: c, Recorder: rec, Now: func() time.Time { return t0 },
				Observer: observe.Observer{Reader: c, Sight: &fixedSight{tt.sight}}}
			res, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &v1alpha1.NodeFence{})
			if fenced := err == nil; fenced != tt.wantFence || (err != nil && !apierrors.IsNotFound(err)) {
				t.Errorf("fenced = %v (%v), want %v", fenced, err, tt.wantFence)
			}
			if diff := cmp.Diff(tt.wantEvents, rec.recorded()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if res.RequeueAfter != tt.wantAfter {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tt.wantAfter)
			}
		})
	}
}

// TestBlindEventsBounded: while blind, the first maxBlindNodeEvents nodes held back get a
// ControllerBlind Event each, every time they are held back; the others none; a new blind
// spell starts the count over with the nodes held back first in it. Nothing is fenced either way.
func TestBlindEventsBounded(t *testing.T) {
	states := map[string]string{}
	const dead = 2*maxBlindNodeEvents + 5
	for i := range dead {
		states[fmt.Sprintf("d%02d", i)] = "dead"
	}
	objs, _ := cluster(states)
	c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, poolPolicy(ipmiMethod))...)).Build()
	rec := &recorder{}
	st := &fixedSight{blindNow}
	r := &NodeReconciler{Client: c, Recorder: rec, Now: func() time.Time { return t0 }, Observer: observe.Observer{Reader: c, Sight: st}}
	pass := func(reverse bool) map[string]int {
		t.Helper()
		before := len(rec.recorded())
		for j := range dead {
			i := j
			if reverse {
				i = dead - 1 - j
			}
			res, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: client.ObjectKey{Name: fmt.Sprintf("d%02d", i)}})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != blindRecheck {
				t.Errorf("d%02d: requeue after %s, want %s", i, res.RequeueAfter, blindRecheck)
			}
		}
		per := map[string]int{}
		for _, e := range rec.recorded()[before:] {
			if e.Reason != ReasonControllerBlind {
				t.Errorf("unexpected event %+v", e)
			}
			per[e.On]++
		}
		return per
	}
	first := pass(false)
	if len(first) != maxBlindNodeEvents {
		t.Errorf("first pass: %d nodes got an Event, want %d", len(first), maxBlindNodeEvents)
	}
	second := pass(false)
	if !cmp.Equal(first, second) {
		t.Errorf("second pass of the same spell: Events on %v, want the same nodes as the first %v", second, first)
	}
	st.st.LastLost = st.st.LastLost.Add(time.Minute)
	third := pass(true) // the nodes held back first are others this time
	if len(third) != maxBlindNodeEvents {
		t.Errorf("a new spell: %d nodes got an Event, want %d", len(third), maxBlindNodeEvents)
	}
	for on := range third {
		if first[on] > 0 {
			t.Errorf("a new spell: %s got an Event for being among the first of the last spell, not of this one", on)
		}
	}
	var fences v1alpha1.NodeFenceList
	if err := c.List(context.Background(), &fences); err != nil || len(fences.Items) != 0 {
		t.Errorf("%d fences while blind (%v), want none", len(fences.Items), err)
	}
}

// TestPolicyBlindCondition reconciles policy "pool" through a loss of sight and back.
func TestPolicyBlindCondition(t *testing.T) {
	type cond struct {
		Status metav1.ConditionStatus
		Reason string
	}
	steps := []struct {
		name       string
		sight      sight.Status
		want       cond
		wantEvents []eventSeen
		// msgHas are parts the message must hold: what is held back, and until when.
		msgHas []string
	}{
		{"seeing", seeingLong, cond{metav1.ConditionFalse, v1alpha1.ReasonSeeing}, nil, nil},
		{"blind", blindNow, cond{metav1.ConditionTrue, v1alpha1.ReasonAPIUnreachable}, []eventSeen{{"FencingPolicy/pool", corev1.EventTypeWarning, ReasonControllerBlind}},
			[]string{"nothing is fenced automatically until it sees its canary Lease again", "a node whose agent and peers are silent too counts as Dead no sooner than its kubelet's next renewal"}},
		{"seeing again, inside the fresh period", seeingAgain, cond{metav1.ConditionTrue, v1alpha1.ReasonFreshLeasePeriod}, nil,
			// The fresh period holds back the Lease's expiry only: the Dead of a node silent on
			// every path comes a renewal interval after sight returned (classify), and the
			// message must not promise that nothing is fenced until the period's end.
			[]string{"no node's Lease counts as expired before " + seeingAgain.Since.Add(20*time.Second).UTC().Format(time.RFC3339),
				"counts as Dead no sooner than its kubelet's next renewal, missed, counted from " + seeingAgain.Since.UTC().Format(time.RFC3339)}},
		{"a lease period later", sight.Status{Cause: sight.APIUnreachable, Since: t0.Add(-21 * time.Second), LastLost: t0.Add(-time.Minute)},
			cond{metav1.ConditionFalse, v1alpha1.ReasonSeeing}, []eventSeen{{"FencingPolicy/pool", corev1.EventTypeNormal, ReasonControllerSeeing}}, nil},
	}
	objs, _ := cluster(map[string]string{"n1": healthy})
	c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, poolPolicy(ipmiMethod))...)).
		WithStatusSubresource(&v1alpha1.FencingPolicy{}).Build()
	s := &fixedSight{}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			s.st = step.sight
			rec := &recorder{}
			r := &PolicyReconciler{Client: c, Recorder: rec, Observer: observe.Observer{Reader: c, Sight: s}, Now: func() time.Time { return t0 }}
			if _, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: client.ObjectKey{Name: "pool"}}); err != nil {
				t.Fatal(err)
			}
			p := &v1alpha1.FencingPolicy{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "pool"}, p); err != nil {
				t.Fatal(err)
			}
			var got cond
			var msg string
			for _, pc := range p.Status.Conditions {
				if pc.Type == v1alpha1.ConditionControllerBlind {
					got, msg = cond{pc.Status, pc.Reason}, pc.Message
				}
			}
			for _, part := range step.msgHas {
				if !strings.Contains(msg, part) {
					t.Errorf("ControllerBlind message %q: want it to say %q", msg, part)
				}
			}
			if strings.Contains(msg, "nothing is fenced automatically until 2") {
				t.Errorf("ControllerBlind message %q promises that nothing is fenced until the fresh period's end; the Dead of a node silent on every path comes sooner", msg)
			}
			if diff := cmp.Diff(step.want, got); diff != "" {
				t.Errorf("ControllerBlind condition (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(step.wantEvents, rec.recorded()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}
