package fencing

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/observe"
)

// podOn is a running pod on n1 in namespace db with labels, owned by kind (none when ""), with
// claims.
func podOn(name, kind string, labels map[string]string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if kind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "db", UID: types.UID("owner"), Controller: ptr.To(true)}}
	}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

func claim(name string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: modes}}
}

// budget is a PodDisruptionBudget over app=db with that many disruptions allowed.
func budget(allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "db"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
}

// A policy with workloads fences a dead node only for the pods it names; a person's request
// is fenced whatever they say; the fence records which pods wait on it and how urgent it is.
func TestWorkloads(t *testing.T) {
	db := map[string]string{"app": "db"}
	stateful := &v1alpha1.Workloads{StatefulSets: true}
	rwo := &v1alpha1.Workloads{RWOVolumes: true}
	selected := &v1alpha1.Workloads{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "data"}}}
	tests := []struct {
		name        string
		workloads   *v1alpha1.Workloads
		objs        []client.Object
		request     bool
		wantFence   bool
		wantWaiting []string
		wantUrgency int32
	}{
		{"no workloads: every pod waits", nil, []client.Object{podOn("web-1", "ReplicaSet", nil), podOn("db-0", "StatefulSet", db)},
			false, true, []string{"db/db-0", "db/web-1"}, 0},
		{"statefulSets: a StatefulSet pod", stateful, []client.Object{podOn("web-1", "ReplicaSet", nil), podOn("db-0", "StatefulSet", db)},
			false, true, []string{"db/db-0"}, 0},
		{"statefulSets: only stateless pods", stateful, []client.Object{podOn("web-1", "ReplicaSet", nil)}, false, false, nil, 0},
		{"statefulSets: no pods at all", stateful, nil, false, false, nil, 0},
		{"rwoVolumes: a ReadWriteOnce claim", rwo, []client.Object{podOn("db-0", "", db, "data"), claim("data", corev1.ReadWriteOnce)},
			false, true, []string{"db/db-0"}, 0},
		{"rwoVolumes: a ReadWriteOncePod claim", rwo, []client.Object{podOn("db-0", "", db, "data"), claim("data", corev1.ReadWriteOncePod)},
			false, true, []string{"db/db-0"}, 0},
		{"rwoVolumes: a ReadWriteMany claim is shared anyway", rwo, []client.Object{podOn("db-0", "", db, "data"), claim("data", corev1.ReadWriteMany, corev1.ReadWriteOnce)},
			false, false, nil, 0},
		{"rwoVolumes: a claim that does not exist", rwo, []client.Object{podOn("db-0", "", db, "gone")}, false, false, nil, 0},
		{"podSelector: a matching pod", selected, []client.Object{podOn("db-0", "", map[string]string{"tier": "data"}), podOn("web-1", "", nil)},
			false, true, []string{"db/db-0"}, 0},
		{"a finished pod waits on nothing", stateful, []client.Object{func() client.Object {
			p := podOn("db-0", "StatefulSet", db)
			p.Status.Phase = corev1.PodSucceeded
			return p
		}()}, false, false, nil, 0},
		{"a budget at its limit makes the fence urgent", stateful, []client.Object{podOn("db-0", "StatefulSet", db), budget(0)},
			false, true, []string{"db/db-0"}, 1},
		{"a budget with room does not", stateful, []client.Object{podOn("db-0", "StatefulSet", db), budget(1)},
			false, true, []string{"db/db-0"}, 0},
		{"a request fences whatever the workloads say", stateful, []client.Object{podOn("web-1", "ReplicaSet", nil)},
			true, true, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, hbs := cluster(map[string]string{"n1": dead, "n2": healthy, "n3": healthy})
			if tt.request {
				objs, hbs = cluster(map[string]string{"n1": healthy})
				for _, o := range objs {
					if n, ok := o.(*corev1.Node); ok && n.Name == "n1" {
						requestedBy("alice", "maintenance")(n)
					}
				}
			}
			p := poolPolicy(ipmiMethod)
			p.Spec.Workloads = tt.workloads
			objs = append(append(objs, p), tt.objs...)
			c := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)).Build()
			rec := &recorder{}
			r := &NodeReconciler{Client: c, Recorder: rec, Observer: observe.Observer{Reader: c, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			nf := &v1alpha1.NodeFence{}
			err := c.Get(ctx, client.ObjectKey{Name: "n1"}, nf)
			if fenced := err == nil; fenced != tt.wantFence {
				t.Fatalf("fenced %v (%v), want %v; events %v", fenced, err, tt.wantFence, rec.recorded())
			}
			if !tt.wantFence {
				if diff := cmp.Diff([]eventSeen{{"Node/n1", corev1.EventTypeNormal, ReasonNoWorkloadToFence}}, rec.recorded()); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}
				return
			}
			if diff := cmp.Diff(tt.wantWaiting, nf.Spec.Waiting); diff != "" {
				t.Errorf("waiting (-want +got):\n%s", diff)
			}
			if nf.Spec.Urgency != tt.wantUrgency {
				t.Errorf("urgency %d, want %d", nf.Spec.Urgency, tt.wantUrgency)
			}
		})
	}
}

// The work queue hands out a fence whose verify window is open first, then the most urgent,
// whatever the order they came in.
func TestByPriority(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	h := byPriority()
	verifying := []v1alpha1.Step{{Name: v1alpha1.StepVerifyFenced, State: v1alpha1.StepStarted}}
	verified := []v1alpha1.Step{{Name: v1alpha1.StepVerifyFenced, State: v1alpha1.StepSucceeded}}
	for _, f := range []struct { // the least urgent first
		name    string
		urgency int32
		steps   []v1alpha1.Step
	}{{"calm", 0, nil}, {"verified", 0, verified}, {"middling", 2, nil}, {"urgent", 5, verified},
		{"verifying", 0, verifying}, {"verifying-urgent", 3, verifying}} {
		nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: f.name}, Spec: v1alpha1.NodeFenceSpec{Urgency: f.urgency}}
		nf.Status.Steps = f.steps
		h.Create(context.Background(), event.TypedCreateEvent[client.Object]{Object: nf}, q)
	}
	var got []string
	for range 6 {
		req, _ := q.Get()
		got = append(got, req.Name)
		q.Done(req)
	}
	// calm and verified have the same priority: the queue hands them out in the order they came.
	if diff := cmp.Diff([]string{"verifying-urgent", "verifying", "urgent", "middling", "calm", "verified"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}
