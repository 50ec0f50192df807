package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed"
)

// Test-speed settings: the simulated kubelets renew every second, the policy fences after 5s.
const (
	renew        = time.Second
	leaseTimeout = 5 * time.Second
)

func startScene(t *testing.T, o scenario.Options) *scenario.Env {
	t.Helper()
	if o.LeaseRenewInterval == 0 {
		o.LeaseRenewInterval = renew
	}
	if o.LeaseTimeout == 0 {
		o.LeaseTimeout = leaseTimeout
	}
	o.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := scenario.Start(ctx, o)
	if err != nil {
		t.Fatalf("starting scene: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the controller's last log lines:\n%s", env.ControllerLogTail(150))
		}
		if err := env.Stop(); err != nil {
			t.Errorf("stopping scene: %v", err)
		}
	})
	return env
}

func startController(t *testing.T, env *scenario.Env) {
	t.Helper()
	if err := env.StartController(context.Background(), nil); err != nil {
		t.Fatalf("starting controller: %v", err)
	}
}

func deploy(t *testing.T, env *scenario.Env) *scenario.Workload {
	t.Helper()
	w, err := env.DeployDatabase(context.Background(), env.Node(1))
	if err != nil {
		t.Fatalf("deploying database: %v", err)
	}
	return w
}

// waitFence waits until the node's NodeFence satisfies ok.
func waitFence(t *testing.T, c *testbed.Cluster, node string, timeout time.Duration, ok func(*v1alpha1.NodeFence) bool) *v1alpha1.NodeFence {
	t.Helper()
	nf := &v1alpha1.NodeFence{}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKey{Name: node}, nf); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return ok(nf), nil
	})
	if err != nil {
		t.Fatalf("waiting for NodeFence %s: %v; last status: %+v", node, err, nf.Status)
	}
	return nf
}

// fenceEnded is waitFence's test for a fence that ended, Released or Failed.
func fenceEnded(nf *v1alpha1.NodeFence) bool {
	return nf.Status.Phase == v1alpha1.PhaseReleased || nf.Status.Phase == v1alpha1.PhaseFailed
}

// assertDisproved fails unless a step of method failed with NodeAliveAfterFence: the node
// showed life after that method's fence was confirmed.
func assertDisproved(t *testing.T, nf *v1alpha1.NodeFence, method string) {
	t.Helper()
	for _, s := range nf.Status.Steps {
		if s.Method == method && s.State == v1alpha1.StepFailed && s.Reason == v1alpha1.ReasonNodeAliveAfterFence {
			return
		}
	}
	t.Errorf("no %s step failed with %s: %v", method, v1alpha1.ReasonNodeAliveAfterFence, trace(nf))
}

func phaseIs(p v1alpha1.Phase) func(*v1alpha1.NodeFence) bool {
	return func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase == p }
}

// trace is the step record as "Name:State" lines, for golden comparisons.
func trace(nf *v1alpha1.NodeFence) []string {
	var out []string
	for _, s := range nf.Status.Steps {
		out = append(out, string(s.Name)+":"+string(s.State))
	}
	return out
}

// stepMessage is the message of the fence's first step named name.
func stepMessage(nf *v1alpha1.NodeFence, name string) string {
	for _, s := range nf.Status.Steps {
		if string(s.Name) == name {
			return s.Message
		}
	}
	return ""
}

func condition(nf *v1alpha1.NodeFence, typ string) (string, string, string) {
	for _, c := range nf.Status.Conditions {
		if c.Type == typ {
			return string(c.Status), c.Reason, c.Message
		}
	}
	return "", "", ""
}

// assertNothingReleased checks invariant 1 from the outside: no taint, the pod and the
// attachment untouched.
func assertNothingReleased(t *testing.T, env *scenario.Env, w *scenario.Workload) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: w.Pod.Spec.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == v1alpha1.TaintOutOfService {
			t.Errorf("node %s carries %s although no fence was confirmed", node.Name, taint.Key)
		}
	}
	pod := &corev1.Pod{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(w.Pod), pod); err != nil {
		t.Errorf("pod %s: %v (it must not be deleted)", w.Pod.Name, err)
	} else if pod.UID != w.Pod.UID || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		t.Errorf("pod %s was touched: uid %s (was %s), deletionTimestamp %v, phase %s", pod.Name, pod.UID, w.Pod.UID, pod.DeletionTimestamp, pod.Status.Phase)
	}
	vas, err := env.Attachments(ctx, w.Pod.Spec.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	if len(vas) != 1 || vas[0].UID != w.Attachment.UID || vas[0].DeletionTimestamp != nil {
		t.Errorf("attachment %s was touched: now %d attachments on the node", w.Attachment.Name, len(vas))
	}
}

// eventsFor lists the reasons and notes of the events regarding an object.
func eventsFor(t *testing.T, env *scenario.Env, kind, name string) []string {
	t.Helper()
	return clusterEvents(t, env.Cluster, kind, name)
}

// clusterEvents is eventsFor on any test bed cluster.
func clusterEvents(t *testing.T, c *testbed.Cluster, kind, name string) []string {
	t.Helper()
	list, err := c.Kube.EventsV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

func hasEvent(events []string, reason string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, reason+":") {
			return true
		}
	}
	return false
}

// assertNoSecret fails when any of secrets shows in an event, a NodeFence's or a
// FencingPolicy's status, or the controller's log: credentials live only in Secrets.
func assertNoSecret(t *testing.T, env *scenario.Env, secrets ...string) {
	t.Helper()
	ctx := context.Background()
	var where []string
	evs, err := env.Cluster.Kube.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		where = append(where, "event "+e.Reason+": "+e.Note)
	}
	var fences v1alpha1.NodeFenceList
	var policies v1alpha1.FencingPolicyList
	if err := env.Cluster.Client.List(ctx, &fences); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.Client.List(ctx, &policies); err != nil {
		t.Fatal(err)
	}
	for _, nf := range fences.Items {
		b, _ := json.Marshal(nf.Status)
		where = append(where, "NodeFence "+nf.Name+" status "+string(b))
	}
	for _, p := range policies.Items {
		b, _ := json.Marshal(p.Status)
		where = append(where, "FencingPolicy "+p.Name+" status "+string(b))
	}
	log := env.ControllerLog()
	if log == "" && os.Getenv("PALISADE_TEST_LOG") != "1" {
		t.Fatal("no controller log to search")
	}
	where = append(where, "controller log")
	for _, s := range secrets {
		for i, w := range where {
			text := w
			if i == len(where)-1 {
				text = log
			}
			if strings.Contains(text, s) {
				t.Errorf("a secret shows in the %s", strings.SplitN(w, ":", 2)[0])
			}
		}
	}
}

// waitBooted waits until the simulated node has booted again since boot ID before and its Node
// reports the new boot, Ready.
func waitBooted(t *testing.T, env *scenario.Env, n *scenario.Node, before string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		node := &corev1.Node{}
		if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: n.Name()}, node); err != nil {
			return false, nil
		}
		return n.BootID() != before && node.Status.NodeInfo.BootID == n.BootID() && scenario.NodeReady(node), nil
	})
	if err != nil {
		t.Fatalf("node %s did not boot again and turn Ready: %v", n.Name(), err)
	}
}
