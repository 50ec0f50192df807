package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/scenario"
)

// Kubelet-like timing for the outage tests: renewals every 10s, fenced after 20s without one.
const (
	kubeletRenew  = 10 * time.Second
	outageTimeout = 20 * time.Second
	outage        = 30 * time.Second // longer than the lease timeout
)

// An outage of the API server longer than the lease timeout, every node healthy and renewing
// on its own 10s rhythm, fences nothing — not with the storm guard wide open (100%), and not
// with the default 40%, under which the nodes renewing one by one after the API comes back
// used to fall (invariant 3). The policy says the controller is blind, then sees again, with
// an Event each way.
func TestAPIServerOutageFencesNothing(t *testing.T) {
	for _, tt := range guards {
		t.Run(tt.name, func(t *testing.T) {
			env := outageScene(t, tt.maxUnhealthy)
			w, before := watchBlindCondition(env), time.Now()
			ctx := context.Background()
			renewed := lastRenewal(t, env)
			if err := env.Cluster.StopAPIServer(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(outage)
			startAPIServerAfterRenewal(t, env, renewed)
			checkSightRegained(t, env, w, before)
		})
	}
}

// The controller restarted together with the API server (a control-plane machine rebooted)
// finds every Lease older than the lease timeout, the nodes not having renewed yet: its start
// gives every node a fresh lease period, and nothing is fenced. The storm guard wide open
// only: TestAPIServerOutageFencesNothing covers the default one.
func TestControllerRestartedWithAPIServerFencesNothing(t *testing.T) {
	for _, tt := range guards[:1] {
		t.Run(tt.name, func(t *testing.T) {
			env := outageScene(t, tt.maxUnhealthy)
			ctx := context.Background()
			renewed, before := lastRenewal(t, env), time.Now()
			if err := env.StopController(); err != nil {
				t.Fatal(err)
			}
			if err := env.Cluster.StopAPIServer(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(outage)
			startAPIServerAfterRenewal(t, env, renewed)
			w := watchBlindCondition(env)
			startController(t, env)
			checkSightRegained(t, env, w, before)
		})
	}
}

// guards are the storm guards the outage tests run under.
var guards = []struct {
	name         string
	maxUnhealthy *intstr.IntOrString
}{
	{"maxUnhealthy 100%", ptrTo(intstr.FromString("100%"))},
	{"default storm guard", nil},
}

// outageScene is five kubelet-like nodes under a policy with the given storm guard, and the
// controller running and seeing (its own start is a loss of sight: the condition turns False
// a lease period on).
func outageScene(t *testing.T, maxUnhealthy *intstr.IntOrString) *scenario.Env {
	t.Helper()
	env := startScene(t, scenario.Options{Nodes: 5, LeaseRenewInterval: kubeletRenew, LeaseTimeout: outageTimeout,
		Policy: func(p *v1alpha1.FencingPolicy) { p.Spec.StormGuard.MaxUnhealthy = maxUnhealthy }})
	startController(t, env)
	waitBlindCondition(t, env, "False", 2*outageTimeout)
	return env
}

// lastRenewal is when node-1 last renewed its Lease: the phase of its 10s rhythm.
func lastRenewal(t *testing.T, env *scenario.Env) time.Time {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := env.Cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: env.Node(1).Name()}, l); err != nil {
		t.Fatal(err)
	}
	return l.Spec.RenewTime.Time
}

// startAPIServerAfterRenewal brings kube-apiserver back just after node-1's renewal rhythm
// ticked (its ticker keeps running through the outage; renewed is one tick), so that it
// renews only some 8s after the API is back: a window in which its Lease, as the controller
// reads it, is older than the lease timeout although the node is fine.
func startAPIServerAfterRenewal(t *testing.T, env *scenario.Env, renewed time.Time) {
	t.Helper()
	phase := time.Since(renewed) % kubeletRenew
	time.Sleep((kubeletRenew + 200*time.Millisecond - phase) % kubeletRenew)
	if err := env.Cluster.StartAPIServer(context.Background()); err != nil {
		t.Fatalf("starting kube-apiserver again: %v", err)
	}
}

// checkSightRegained waits until the policy shows ControllerBlind=True, then False (a lease
// period after the controller sees again), then a renewal more, and checks that nothing was
// fenced and that the policy said so with Events observed since before (the outage).
func checkSightRegained(t *testing.T, env *scenario.Env, w *conditionWatch, before time.Time) {
	t.Helper()
	waitBlindCondition(t, env, "True", time.Minute)
	began := time.Now()
	// The watch comes back on client-go's reflector backoff (up to a minute after a long
	// outage, with jitter), then a lease period passes: 2m0s was measured on an idle machine.
	waitBlindCondition(t, env, "False", 5*time.Minute)
	t.Logf("ControllerBlind=True for %s after the API came back", time.Since(began).Round(100*time.Millisecond))
	time.Sleep(kubeletRenew + 5*time.Second)
	t.Logf("ControllerBlind seen: %v", w.stop())
	assertNothingFenced(t, env)
	// The loud one, ControllerBlind, must be observed after the outage began. ControllerSeeing
	// only needs to exist: the events library writes the first repeat of an Event at once and
	// later repeats of the same series only at its 30-minute refresh, so a Seeing that follows
	// an earlier Seeing (the controller's own start) may not reach the API within the test.
	// The condition's turn to False above is the prompt signal.
	waitPolicyEvent(t, env, fencing.ReasonControllerBlind, before)
	waitPolicyEvent(t, env, fencing.ReasonControllerSeeing, time.Time{})
}

// waitPolicyEvent waits for an Event on the policy with the reason, observed after since. The
// recorder folds an Event like an earlier one into that one's series (same object, count and
// last observation updated), and retries while the API is away: look at the last observation.
func waitPolicyEvent(t *testing.T, env *scenario.Env, reason string, since time.Time) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.Cluster.Kube.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range list.Items {
			last := e.EventTime.Time
			if e.Series != nil {
				last = e.Series.LastObservedTime.Time
			}
			if e.Regarding.Kind == "FencingPolicy" && e.Regarding.Name == scenario.PolicyName && e.Reason == reason && last.After(since) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s Event on the policy observed since %s; events: %v", reason, since.Format(time.RFC3339), eventsFor(t, env, "FencingPolicy", scenario.PolicyName))
	}
}

func ptrTo[T any](v T) *T { return &v }

// assertNothingFenced: no NodeFence, and every machine still on, with no power-off command
// ever sent to its BMC.
func assertNothingFenced(t *testing.T, env *scenario.Env) {
	t.Helper()
	var fences v1alpha1.NodeFenceList
	if err := env.Cluster.Client.List(context.Background(), &fences); err != nil {
		t.Fatal(err)
	}
	for _, nf := range fences.Items {
		t.Errorf("node %s fenced after the outage: %s", nf.Spec.NodeName, nf.Spec.Reason)
	}
	for _, n := range env.Nodes {
		on, err := n.BMC.PoweredOn()
		if err != nil {
			t.Fatal(err)
		}
		offs, err := n.BMC.OffCommands()
		if err != nil {
			t.Fatal(err)
		}
		if !on || offs > 0 {
			t.Errorf("node %s: powered on %v, %d power-off commands", n.Name(), on, offs)
		}
	}
}

// blindCondition is the policy's ControllerBlind condition as "Status/Reason".
func blindCondition(ctx context.Context, env *scenario.Env) (string, error) {
	p := &v1alpha1.FencingPolicy{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: scenario.PolicyName}, p); err != nil {
		return "", err
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1alpha1.ConditionControllerBlind {
			return fmt.Sprintf("%s/%s", c.Status, c.Reason), nil
		}
	}
	return "", nil
}

func waitBlindCondition(t *testing.T, env *scenario.Env, status string, timeout time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		c, err := blindCondition(ctx, env)
		if err == nil {
			last = c
		}
		return err == nil && len(c) > len(status) && c[:len(status)+1] == status+"/", nil
	})
	if err != nil {
		t.Fatalf("waiting for ControllerBlind=%s: %v; last %q", status, err, last)
	}
}

// conditionWatch records every distinct ControllerBlind value the policy shows, in order.
type conditionWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	seen   []string
}

func watchBlindCondition(env *scenario.Env) *conditionWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &conditionWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			if c, err := blindCondition(ctx, env); err == nil {
				w.mu.Lock()
				if len(w.seen) == 0 || w.seen[len(w.seen)-1] != c {
					w.seen = append(w.seen, c)
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *conditionWatch) stop() []string {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}
