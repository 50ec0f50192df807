package fencing

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/observe"
)

// recoveredFence is n1's NodeFence of carol's manual request "disk errors", ended Recovered.
func recoveredFence() *v1alpha1.NodeFence {
	at := metav1.NewTime(t0.Add(-time.Second))
	return &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{v1alpha1.LabelNode: "n1"}},
		Spec: v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "pool", Trigger: v1alpha1.TriggerManual, Reason: "disk errors",
			RequestedBy: "carol", Methods: []v1alpha1.Method{ipmiMethod}},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRecovered,
			Recovery: &v1alpha1.RecoveryRecord{How: v1alpha1.RecoveryRebooted, Time: at, RecoveredTime: &at}}}
}

// Recovery removes the answered request from the Node before it records the fence Recovered,
// so the recovery's event can wake the node reconciler while its cache still shows the Node
// with the request. A fence is made from a request only once the API server's copy of the Node
// confirms it: otherwise the node just given back would be powered off again.
func TestRequestConfirmedOnTheAPIServer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		onTheAPI  bool // the API server's copy of n1 still carries the request (the cache's does)
		wantFence bool
	}{
		{name: "the cache alone still shows the answered request", onTheAPI: false, wantFence: false},
		{name: "the request is on the API server's copy too", onTheAPI: true, wantFence: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, hbs := cluster(map[string]string{"n1": healthy, "n2": healthy})
			for _, o := range objs {
				if n, ok := o.(*corev1.Node); ok && n.Name == "n1" {
					n.Finalizers = []string{v1alpha1.FinalizerFenceOnDelete} // covered by the policy all along
					if tc.onTheAPI {
						requestedBy("carol", "disk errors")(n)
					}
				}
			}
			objs = append(objs, poolPolicy(ipmiMethod), recoveredFence())
			api := withPodIndex(fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
				WithStatusSubresource(&v1alpha1.NodeFence{})).Build()
			cache := interceptor.NewClient(api.(client.WithWatch), interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if err := c.Get(ctx, key, obj, opts...); err != nil {
						return err
					}
					if n, ok := obj.(*corev1.Node); ok && n.Name == "n1" && n.Annotations[v1alpha1.AnnotationFenceRequest] == "" {
						requestedBy("carol", "disk errors")(n) // the copy from before the recovery's write
					}
					return nil
				},
			})
			rec := &recorder{}
			r := &NodeReconciler{Client: cache, APIReader: api, Recorder: rec, Observer: observe.Observer{Reader: api, Heartbeats: hbs}, Now: func() time.Time { return t0 }}
			ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			nf := &v1alpha1.NodeFence{}
			if err := api.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
				t.Fatal(err)
			}
			if fenced := nf.Status.Phase != v1alpha1.PhaseRecovered; fenced != tc.wantFence {
				t.Errorf("n1's NodeFence: phase %q, trigger %s, reason %q; want a new fence: %v", nf.Status.Phase, nf.Spec.Trigger, nf.Spec.Reason, tc.wantFence)
			}
			if tc.wantFence && (nf.Spec.Trigger != v1alpha1.TriggerManual || nf.Spec.RequestedBy != "carol" || nf.Spec.PreviousRecoveryTime == nil) {
				t.Errorf("new fence %+v, want carol's manual fence recording the last recovery", nf.Spec)
			}
		})
	}
}
