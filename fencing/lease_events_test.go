package fencing

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/detectors/sight"
)

// nodeLease is node's Lease renewed at renew, held by holder.
func nodeLease(node, holder string, renew time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(renew)
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: node},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &t}}
}

// Every Lease event records its renewal as seen at once; a plain renewal of a node whose
// latest reconcile left a look pending wakes nothing, and every other Lease event wakes its node.
func TestLeaseEventsWakeOnlyWhatMayChange(t *testing.T) {
	now := t0
	r := &NodeReconciler{Observer: observe.Observer{Renewals: lease.NewRenewals()}, Now: func() time.Time { return now }}
	h := r.leaseEvents()
	ctx := context.Background()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	woken := func() []string {
		var out []string
		for q.Len() > 0 {
			req, _ := q.Get()
			out = append(out, req.Name)
			q.Done(req)
			q.Forget(req)
		}
		return out
	}
	renewed := func(old *coordinationv1.Lease, d time.Duration, edit func(*coordinationv1.Lease)) *coordinationv1.Lease {
		n := old.DeepCopy()
		n.Spec.RenewTime = ptr.To(metav1.NewMicroTime(old.Spec.RenewTime.Add(d)))
		if edit != nil {
			edit(n)
		}
		return n
	}
	l0 := nodeLease("n1", "n1", t0.Add(-10*time.Second))
	r.looks.set("n1", true)
	tests := []struct {
		name string
		send func()
		want []string
	}{
		{"a plain renewal of a node with a look pending", func() {
			h.Update(ctx, event.UpdateEvent{ObjectOld: l0, ObjectNew: renewed(l0, 10*time.Second, nil)}, q)
		}, nil},
		{"a new holder", func() {
			h.Update(ctx, event.UpdateEvent{ObjectOld: l0, ObjectNew: renewed(l0, 10*time.Second, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("other") })}, q)
		}, []string{"n1"}},
		{"a new duration", func() {
			h.Update(ctx, event.UpdateEvent{ObjectOld: l0, ObjectNew: renewed(l0, 10*time.Second, func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](10) })}, q)
		}, []string{"n1"}},
		{"an update that renews nothing", func() {
			h.Update(ctx, event.UpdateEvent{ObjectOld: l0, ObjectNew: renewed(l0, 0, func(l *coordinationv1.Lease) { l.Labels = map[string]string{"a": "b"} })}, q)
		}, []string{"n1"}},
		{"a renewal going back", func() {
			h.Update(ctx, event.UpdateEvent{ObjectOld: l0, ObjectNew: renewed(l0, -time.Second, nil)}, q)
		}, []string{"n1"}},
		{"a renewal of a node with no look pending", func() {
			l := nodeLease("n2", "n2", t0)
			h.Update(ctx, event.UpdateEvent{ObjectOld: l, ObjectNew: renewed(l, 10*time.Second, nil)}, q)
		}, []string{"n2"}},
		{"a created Lease", func() { h.Create(ctx, event.CreateEvent{Object: nodeLease("n1", "n1", t0)}, q) }, []string{"n1"}},
		{"a deleted Lease", func() { h.Delete(ctx, event.DeleteEvent{Object: l0}, q) }, []string{"n1"}},
		{"a Lease in another namespace", func() {
			l := nodeLease("n1", "n1", t0)
			l.Namespace = "palisade-system"
			h.Update(ctx, event.UpdateEvent{ObjectOld: l, ObjectNew: renewed(l, 10*time.Second, nil)}, q)
			h.Create(ctx, event.CreateEvent{Object: l}, q)
		}, nil},
		{"the controller's sight canary, renewed every second", func() {
			c := nodeLease(sight.CanaryName, "palisade-controller", t0)
			h.Create(ctx, event.CreateEvent{Object: c}, q)
			h.Update(ctx, event.UpdateEvent{ObjectOld: c, ObjectNew: renewed(c, time.Second, nil)}, q)
			h.Update(ctx, event.UpdateEvent{ObjectOld: c, ObjectNew: renewed(c, time.Second, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("other") })}, q)
			h.Delete(ctx, event.DeleteEvent{Object: c}, q)
			if later := t0.Add(time.Hour); !r.Observer.Renewals.Seen(sight.CanaryName, t0, later).Equal(later) {
				t.Errorf("the canary's renewal is on record as a node's")
			}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.send()
			got := woken()
			if len(got) != len(tt.want) || (len(got) == 1 && got[0] != tt.want[0]) {
				t.Errorf("woke %v, want %v", got, tt.want)
			}
		})
	}

	// The skipped renewal is on record as seen when its event came, not when a later look at
	// the node reads it.
	now = t0.Add(3 * time.Second)
	next := renewed(l0, 20*time.Second, nil)
	h.Update(ctx, event.UpdateEvent{ObjectOld: l0, ObjectNew: next}, q)
	if got := woken(); len(got) != 0 {
		t.Errorf("woke %v for a plain renewal of a node with a look pending", got)
	}
	if seen := r.Observer.Renewals.Seen("n1", next.Spec.RenewTime.Time, t0.Add(time.Minute)); !seen.Equal(now) {
		t.Errorf("the renewal is on record as seen at %s, want %s (its event)", seen, now)
	}
	// And how late it came: the next renewal's event 13 s after, for a Lease renewed every
	// 10 s, is 3 s late, whatever the look at the node does later.
	now = now.Add(13 * time.Second)
	h.Update(ctx, event.UpdateEvent{ObjectOld: next, ObjectNew: renewed(l0, 30*time.Second, nil)}, q)
	if got, want := r.Observer.Renewals.Lateness("n1", now), 3*time.Second; got != want {
		t.Errorf("the renewals' lateness on record = %s, want %s", got, want)
	}
}

// Only a reconcile that judges the node not failed (Healthy, or late: Suspect) lets its
// renewals pass by, its look again pending; every other outcome (failed, a fence on record, a
// manual request, no policy) has its renewals wake it.
func TestOnlyANotFailedVerdictLetsRenewalsPass(t *testing.T) {
	late := func(objs []client.Object) {
		for _, o := range objs {
			if l, ok := o.(*coordinationv1.Lease); ok && l.Name == "n1" {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(-15 * time.Second))) // past half the 20s timeout
			}
		}
	}
	tests := []struct {
		name   string
		state  string
		edit   func(objs []client.Object)
		policy bool
		fence  bool
		manual bool
		want   bool
	}{
		{name: "healthy", state: healthy, policy: true, want: true},
		{name: "late", state: healthy, edit: late, policy: true, want: true},
		{name: "dead", state: dead, policy: true},
		{name: "partitioned", state: partitioned, policy: true},
		{name: "healthy without a policy", state: healthy},
		{name: "healthy with a fence on record", state: healthy, policy: true, fence: true},
		{name: "healthy with a manual request", state: healthy, policy: true, manual: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, hbs := cluster(map[string]string{"n1": tt.state, "n2": healthy, "n3": healthy})
			if tt.edit != nil {
				tt.edit(objs)
			}
			for _, o := range objs {
				if n, ok := o.(*corev1.Node); ok && n.Name == "n1" && tt.manual {
					requestedBy("alice", "maintenance")(n)
				}
			}
			if tt.policy {
				objs = append(objs, poolPolicy(ipmiMethod))
			}
			if tt.fence {
				objs = append(objs, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}})
			}
			c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
			r := &NodeReconciler{Client: c, Recorder: &recorder{}, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
			r.looks.set("n1", !tt.want) // the opposite of what this reconcile must leave
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			if got := r.looks.has("n1"); got != tt.want {
				t.Errorf("look pending (renewals pass by) = %v, want %v", got, tt.want)
			}
		})
	}
}
