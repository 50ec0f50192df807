package fencing

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
)

// TestRepeats: a node's repeated line is due once every repeatEvery, each node and each line on
// its own clock, and a forgotten node's next line (a new episode) is due at once.
func TestRepeats(t *testing.T) {
	var r repeats
	t0 := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	steps := []struct {
		node, line string
		at         time.Duration
		want       bool
	}{
		{"a", "storm", 0, true},
		{"a", "storm", time.Second, false},
		{"a", "alive", time.Second, true},
		{"b", "storm", time.Second, true},
		{"a", "storm", repeatEvery - time.Millisecond, false},
		{"a", "storm", repeatEvery, true},
		{"a", "storm", repeatEvery + time.Second, false},
		{"b", "storm", repeatEvery + time.Second, true},
	}
	for i, s := range steps {
		if got := r.due(s.node, s.line, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d (%s %s at +%s): due %v, want %v", i, s.node, s.line, s.at, got, s.want)
		}
	}
	r.forget("a")
	if !r.due("a", "storm", t0.Add(repeatEvery+2*time.Second)) {
		t.Error("a forgotten node's line is not due at once")
	}
	if r.due("b", "storm", t0.Add(repeatEvery+2*time.Second)) {
		t.Error("forgetting node a forgot node b's line too")
	}
	// A clock stepped back does not silence the line until it catches up.
	if !r.due("a", "storm", t0) {
		t.Error("after the clock stepped back, the line is not due")
	}
}

// TestRecheckLinesThinned: a partitioned node, which a policy with only a power method does not
// fence, is looked at again every second; the line saying so is written at the default
// verbosity once a minute, at V(1) in between, and at once again when a new episode begins after
// the node was judged not failed.
func TestRecheckLinesThinned(t *testing.T) {
	objs, hbs := cluster(map[string]string{"n1": partitioned})
	objs = append(objs, poolPolicy(ipmiMethod))
	c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
	now := t0
	r := &NodeReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return now }}
	var levels []string // the level of each "alive on others" line
	log := funcr.New(func(_, args string) {
		if strings.Contains(args, "alive on others") {
			levels = append(levels, args[:strings.Index(args, " ")])
		}
	}, funcr.Options{Verbosity: 1})
	ctx := ctrl.LoggerInto(context.Background(), log)
	renewed := func(ago time.Duration) {
		l := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: lease.Namespace, Name: "n1"}, l); err != nil {
			t.Fatal(err)
		}
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-ago)))
		if err := c.Update(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	reconcileAt := func(at time.Duration) {
		now = t0.Add(at)
		hb := hbs["n1"]
		hb.Received = now.Add(-100 * time.Millisecond)
		hbs["n1"] = hb
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, at := range []time.Duration{0, time.Second, 2 * time.Second, repeatEvery, repeatEvery + time.Second} {
		reconcileAt(at)
	}
	renewed(time.Second) // the kubelet renews again: not failed, the episode is over
	reconcileAt(repeatEvery + 2*time.Second)
	renewed(time.Minute) // and partitioned again
	reconcileAt(repeatEvery + 3*time.Second)
	want := []string{`"level"=0`, `"level"=1`, `"level"=1`, `"level"=0`, `"level"=1`, `"level"=0`}
	if !slices.Equal(levels, want) {
		t.Errorf("the lines' levels: %v, want %v", levels, want)
	}
}
