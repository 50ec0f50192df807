package fencing

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/agent"
	"palisade.dev/palisade/providers/fake"
)

// Adding a method takes a provider and one row of methodKinds: the planner, the state machine,
// the Fenced condition, the release guard and the node controller's choice of methods all
// follow from the row.
func TestAddingAFakeFencingMethodTakesOneProviderAndOneTableRow(t *testing.T) {
	const (
		typ              = v1alpha1.MethodType("Fake")
		start            = v1alpha1.StepName("FakeFence")
		check            = v1alpha1.StepName("FakeConfirm")
		confirmed        = "FakeFenceConfirmed"
		needsAgent       = false
		provider         = "fake-method"
		wantFenceMessage = "fake: fence ordered"
	)
	methodKinds[typ] = methodKind{fence: start, confirm: check, confirmedReason: confirmed, needsAgent: needsAgent}
	t.Cleanup(func() { delete(methodKinds, typ) })

	w := newWorld(t)
	f := fake.NewNamed(provider)
	w.r.Fencers[typ] = f
	setMethods(t, w, v1alpha1.Method{Name: "fake", Type: typ})
	nf := w.run(t)

	want := "phase Released\n" +
		"FakeFence          fake    Succeeded attempts=1 \n" +
		"FakeConfirm        fake    Succeeded attempts=1 \n" +
		"VerifyFenced               Succeeded attempts=12 \n" +
		"Taint                      Succeeded attempts=1 \n" +
		"DeletePods                 Succeeded attempts=1 \n" +
		"ReleaseAttachments         Succeeded attempts=1 \n" +
		"condition Fenced=True FakeFenceConfirmed\n" +
		"condition Released=True Released\n"
	if diff := cmp.Diff(want, goldenTrace(nf)); diff != "" {
		t.Errorf("step trace (-want +got):\n%s", diff)
	}
	if nf.Status.Steps[0].Message != wantFenceMessage || nf.Status.Method != "fake" || nf.Status.FencedTime == nil {
		t.Errorf("record: first step %q, method %q, fenced at %v; want %q, fake, a time", nf.Status.Steps[0].Message, nf.Status.Method, nf.Status.FencedTime, wantFenceMessage)
	}
	wantCalls := []fake.Call{{Method: fake.MethodFence, Node: "n1"}, {Method: fake.MethodCheck, Node: "n1"}, {Method: fake.MethodEnd, Node: "n1"}}
	if diff := cmp.Diff(wantCalls, f.Calls()); diff != "" {
		t.Errorf("provider calls (-want +got):\n%s", diff)
	}
	checkReleased(t, w, true)
}

// setMethods replaces the chain of the world's NodeFence.
func setMethods(t *testing.T, w *world, methods ...v1alpha1.Method) {
	t.Helper()
	nf := &v1alpha1.NodeFence{}
	ctx := context.Background()
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	nf.Spec.Methods = methods
	if err := w.c.Update(ctx, nf); err != nil {
		t.Fatal(err)
	}
}

// channel is the agent's direct channel as agent.Provider sees it: it serves a node's pending
// order in the answer to each of its heartbeats until the order is cleared, and answers with
// the executor status the test sets.
type channel struct {
	mu       sync.Mutex
	commands map[string]agentwire.Command
	orders   int // SetCommand calls
	status   agentwire.ExecutorStatus
	running  int
}

func (c *channel) SetCommand(node string, cmd agentwire.Command) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commands[node] = cmd
	c.orders++
}

func (c *channel) ClearCommand(node, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id == "" || c.commands[node].ID == id {
		delete(c.commands, node)
	}
}

func (c *channel) ExecutorStatus(string) (agentwire.ExecutorStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status, c.status.ID != ""
}

func (c *channel) Snapshot() map[string]agentwire.Heartbeat {
	c.mu.Lock()
	defer c.mu.Unlock()
	return map[string]agentwire.Heartbeat{"n1": {Node: "n1", RunningContainers: &c.running}}
}

func (c *channel) Latest(node string) (agentwire.Heartbeat, []agentwire.Sighting, bool) {
	return agentwire.LatestOf(c.Snapshot(), node)
}

func (c *channel) EachReceived(fn func(string, time.Time, time.Duration)) {
	agentwire.EachReceivedOf(c.Snapshot(), fn)
}

func (c *channel) LastReached(node string) time.Time {
	return agentwire.LastReachedOf(c.Snapshot(), node)
}

// served is the order a heartbeat of node would be answered with.
func (c *channel) served(node string) (agentwire.Command, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd, ok := c.commands[node]
	return cmd, ok
}

// A pending order ends with its fence: once the fence is Released or Failed, or the executor
// method failed and the chain escalated, the node's heartbeats are no longer answered with it.
func TestOrderEndsWithItsFence(t *testing.T) {
	tests := []struct {
		name    string
		methods []string
		state   string
		phase   v1alpha1.Phase
		fenced  string // the Fenced condition's reason
	}{
		{"released", []string{"executor"}, agentwire.ExecutorConfirmed, v1alpha1.PhaseReleased, v1alpha1.ReasonWorkloadTerminationConfirmed},
		{"failed", []string{"executor"}, agentwire.ExecutorFailed, v1alpha1.PhaseFailed, string(providers.ReasonExecutorFailed)},
		{"escalated to power-off", []string{"executor", "ipmi"}, agentwire.ExecutorFailed, v1alpha1.PhaseReleased, v1alpha1.ReasonPowerOffConfirmed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, tt.methods...)
			ch := &channel{commands: map[string]agentwire.Command{}}
			w.r.Fencers[v1alpha1.MethodExecutor] = agent.New(ch, w.c)
			ctx := context.Background()
			nf := &v1alpha1.NodeFence{}
			if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
				t.Fatal(err)
			}
			ch.status = agentwire.ExecutorStatus{ID: agent.OrderID(providers.Request{Fence: nf, Method: v1alpha1.Method{Name: "executor"}}), State: tt.state, Message: "test"}
			nf = w.run(t)
			if nf.Status.Phase != tt.phase {
				t.Fatalf("phase %s, want %s; UID %q:\n%s", nf.Status.Phase, tt.phase, nf.UID, goldenTrace(nf))
			}
			if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionFenced); c == nil || c.Reason != tt.fenced {
				t.Errorf("Fenced condition %+v, want reason %s", c, tt.fenced)
			}
			if ch.orders == 0 {
				t.Fatal("the order was never given")
			}
			if cmd, ok := ch.served("n1"); ok {
				t.Errorf("order %+v still served after the fence's executor method ended", cmd)
			}
		})
	}
}

// Every method type of the API has a row, and no two rows, nor a row and the release
// sequence, share a step: the planner finds a step's method kind by its name.
func TestMethodKindsCoverTheAPI(t *testing.T) {
	seen := map[v1alpha1.StepName]v1alpha1.MethodType{}
	for _, s := range releaseSequence {
		seen[s] = "release"
	}
	for _, typ := range []v1alpha1.MethodType{v1alpha1.MethodIPMI, v1alpha1.MethodExecutor, v1alpha1.MethodSelfFence} {
		k, ok := methodKinds[typ]
		if !ok {
			t.Errorf("method type %s has no row", typ)
			continue
		}
		for _, s := range []v1alpha1.StepName{k.fence, k.confirm} {
			if other, dup := seen[s]; dup {
				t.Errorf("step %s of %s is also a step of %s", s, typ, other)
			}
			seen[s] = typ
		}
		if k.confirmedReason == "" {
			t.Errorf("method type %s has no Fenced reason", typ)
		}
	}
}

// A NodeFence deleted before its end (a person's "delete this NodeFence to try again") ends
// its order too.
func TestOrderEndsWhenItsFenceIsDeleted(t *testing.T) {
	w := newWorld(t, "executor")
	ch := &channel{commands: map[string]agentwire.Command{}}
	w.r.Fencers[v1alpha1.MethodExecutor] = agent.New(ch, w.c)
	ctx := context.Background()
	req := ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}
	if _, err := w.r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, ok := ch.served("n1"); !ok {
		t.Fatal("no order served while the fence runs")
	}
	if err := w.c.Delete(ctx, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if cmd, ok := ch.served("n1"); ok {
		t.Errorf("order %+v still served after its NodeFence was deleted", cmd)
	}
}
