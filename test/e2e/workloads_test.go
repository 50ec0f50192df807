package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/scenario"
)

// Workload-aware fencing on the real control plane: under a policy that fences for StatefulSet
// pods only, a node that loses its power holding a plain pod is left to Kubernetes (an event
// says why, no NodeFence, its machine is not powered off by Palisade), while the node holding
// the StatefulSet's pod is fenced, the fence naming that pod as waiting on it.
func TestWorkloadAwareFencing(t *testing.T) {
	env := startScene(t, scenario.Options{Policy: func(p *v1alpha1.FencingPolicy) {
		p.Spec.Workloads = &v1alpha1.Workloads{StatefulSets: true}
	}})
	startController(t, env)
	w := deploy(t, env) // db-0, a StatefulSet's pod, on node 1
	ctx := context.Background()
	n1, n2 := env.Node(1), env.Node(2)
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.PodSpec{NodeName: n2.Name(), Containers: []corev1.Container{{Name: "web", Image: "busybox"}}}}
	if err := env.Cluster.Client.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}

	if err := n2.BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return hasEvent(eventsFor(t, env, "Node", n2.Name()), fencing.ReasonNoWorkloadToFence), nil
	})
	if err != nil {
		t.Fatalf("no %s event on %s: %v", fencing.ReasonNoWorkloadToFence, n2.Name(), eventsFor(t, env, "Node", n2.Name()))
	}
	time.Sleep(5 * time.Second) // a few more looks at the failed node
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: n2.Name()}, &v1alpha1.NodeFence{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s holds no StatefulSet pod and was fenced anyway (err %v)", n2.Name(), err)
	}
	if offs, err := n2.BMC.OffCommands(); err != nil || offs != 0 {
		t.Errorf("%s's BMC received %d power-off commands (err %v), want none", n2.Name(), offs, err)
	}

	// n2 back, so that the storm guard (two of three nodes failed) does not hold n1's fence.
	if err := n2.BMC.SetPower(true); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, env, n2.Name())
	if err := n1.BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, fenceEnded)
	want := w.Pod.Namespace + "/" + w.Pod.Name
	if nf.Status.Phase != v1alpha1.PhaseReleased || !slices.Contains(nf.Spec.Waiting, want) {
		t.Errorf("fence of %s: %s, waiting %v; want Released with %s waiting", n1.Name(), nf.Status.Phase, nf.Spec.Waiting, want)
	}
}
