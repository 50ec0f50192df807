package agent

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/providers"
)

// channel is a stand-in for channel.Server: a pending command per node and one status.
type channel struct {
	commands map[string]agentwire.Command
	status   *agentwire.ExecutorStatus
	running  *int
}

func (c *channel) SetCommand(node string, cmd agentwire.Command) { c.commands[node] = cmd }
func (c *channel) ClearCommand(node, id string) {
	if id == "" || c.commands[node].ID == id {
		delete(c.commands, node)
	}
}
func (c *channel) ExecutorStatus(string) (agentwire.ExecutorStatus, bool) {
	if c.status == nil {
		return agentwire.ExecutorStatus{}, false
	}
	return *c.status, true
}
func (c *channel) Latest(node string) (agentwire.Heartbeat, []agentwire.Sighting, bool) {
	return agentwire.LatestOf(map[string]agentwire.Heartbeat{"n1": {Node: "n1", RunningContainers: c.running}}, node)
}

// request is a request of method "executor" of fence f1 (token 41) on node n1.
func request(verdict detectors.Verdict) providers.Request {
	return providers.Request{Fence: &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "f1"},
		Spec:   v1alpha1.NodeFenceSpec{NodeName: "n1", Verdict: string(verdict)},
		Status: v1alpha1.NodeFenceStatus{Token: 41}},
		Method: v1alpha1.Method{Name: "executor", Type: v1alpha1.MethodExecutor}}
}

// method is req for the method named name of the same fence.
func method(req providers.Request, name string) providers.Request {
	req.Method.Name = name
	return req
}

// apiWorld is a fake API server holding the NodeFence of req, and a provider on it.
func apiWorld(t *testing.T, req providers.Request) (client.Client, *Provider) {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fakeclient.NewClientBuilder().WithScheme(s).WithObjects(req.Fence.DeepCopy()).Build()
	return c, New(&channel{commands: map[string]agentwire.Command{}}, c)
}

// annotations are the NodeFence n1's annotations.
func annotations(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	nf := &v1alpha1.NodeFence{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	return nf.Annotations
}

// order is the order on the NodeFence n1.
func order(t *testing.T, c client.Client) agentwire.Command {
	t.Helper()
	var cmd agentwire.Command
	if err := json.Unmarshal([]byte(annotations(t, c)[v1alpha1.AnnotationExecutorCommand]), &cmd); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// Over the direct channel: the order is served until End, and only a confirmed report with a
// runtime read-back of no container confirms.
func TestDirectOrder(t *testing.T) {
	ch := &channel{commands: map[string]agentwire.Command{}}
	p := New(ch, nil)
	req := request(detectors.Partitioned)
	ctx := context.Background()
	st, err := p.Fence(ctx, req)
	if err != nil || ch.commands["n1"].ID != "f1/executor" || ch.commands["n1"].Token != 41 {
		t.Fatalf("Fence = %+v, %v; commands %v; want order f1/executor with the fence's token 41", st, err, ch.commands)
	}
	zero, two := 0, 2
	steps := []struct {
		name    string
		status  *agentwire.ExecutorStatus
		running *int
		want    providers.State
		reason  providers.Reason
	}{
		{"no answer yet", nil, nil, providers.InProgress, ""},
		{"an answer for another order", &agentwire.ExecutorStatus{ID: "old", State: agentwire.ExecutorConfirmed}, &zero, providers.InProgress, ""},
		{"an answer for the fence's UID alone", &agentwire.ExecutorStatus{ID: "f1", State: agentwire.ExecutorConfirmed}, &zero, providers.InProgress, ""},
		{"running", &agentwire.ExecutorStatus{ID: "f1/executor", State: agentwire.ExecutorRunning}, &two, providers.InProgress, ""},
		{"done without read-back", &agentwire.ExecutorStatus{ID: "f1/executor", State: agentwire.ExecutorConfirmed}, nil, providers.InProgress, ""},
		{"done, containers still running", &agentwire.ExecutorStatus{ID: "f1/executor", State: agentwire.ExecutorConfirmed}, &two, providers.InProgress, ""},
		{"done, none running", &agentwire.ExecutorStatus{ID: "f1/executor", State: agentwire.ExecutorConfirmed}, &zero, providers.Confirmed, ""},
		{"failed", &agentwire.ExecutorStatus{ID: "f1/executor", State: agentwire.ExecutorFailed, Message: "no runtime"}, &zero, providers.Failed, providers.ReasonExecutorFailed},
		{"refused: stale token", &agentwire.ExecutorStatus{ID: "f1/executor", State: agentwire.ExecutorFailed, Reason: agentwire.ReasonStaleToken, Message: "refused"}, &zero,
			providers.Failed, providers.ReasonStaleToken},
		{"refused: token not recorded", &agentwire.ExecutorStatus{ID: "f1/executor", State: agentwire.ExecutorFailed, Reason: agentwire.ReasonTokenNotRecorded, Message: "refused"}, &zero,
			providers.Failed, providers.ReasonTokenNotRecorded},
	}
	for _, s := range steps {
		ch.status, ch.running = s.status, s.running
		got, err := p.Check(ctx, req)
		if err != nil || got.State != s.want || (s.reason != "" && got.Reason != s.reason) {
			t.Errorf("%s: Check = %+v, %v; want %s %s", s.name, got, err, s.want, s.reason)
		}
	}
	if err := p.End(ctx, req); err != nil {
		t.Fatal(err)
	}
	if cmd, ok := ch.commands["n1"]; ok {
		t.Errorf("order %+v still served after End", cmd)
	}
}

// Through the API server (kubelet down): the order is written into the NodeFence's
// annotation, and the agent's answer is read from the other.
func TestOrderThroughTheAPIServer(t *testing.T) {
	req := request(detectors.KubeletDown)
	c, p := apiWorld(t, req)
	ctx := context.Background()
	if _, err := p.Fence(ctx, req); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(agentwire.Command{ID: "f1/executor", Action: agentwire.ActionTerminate, Token: 41}, order(t, c)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if st, err := p.Check(ctx, req); err != nil || st.State != providers.InProgress {
		t.Errorf("Check before an answer = %+v, %v; want InProgress", st, err)
	}
}

// The order through the API server is taken back when its method ends: the NodeFence outlives
// the fence, and an agent restarted later would otherwise carry the order out on a node back
// in service. End for another order (another method, another fence, a deleted NodeFence's)
// leaves it.
func TestEndRemovesItsOrderFromTheNodeFence(t *testing.T) {
	req := request(detectors.KubeletDown)
	otherFence := request(detectors.KubeletDown)
	otherFence.Fence.UID = "f0"
	deleted := providers.Request{Fence: &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}},
		Method: v1alpha1.Method{Type: v1alpha1.MethodExecutor}}
	c, p := apiWorld(t, req)
	ctx := context.Background()
	if _, err := p.Fence(ctx, req); err != nil {
		t.Fatal(err)
	}
	for name, other := range map[string]providers.Request{"another method": method(req, "executor-2"), "another fence": otherFence, "a deleted NodeFence": deleted} {
		if err := p.End(ctx, other); err != nil {
			t.Errorf("End for %s: %v", name, err)
		}
		if got := order(t, c); got.ID != "f1/executor" {
			t.Errorf("after End for %s, the order is %+v; want f1/executor still there", name, got)
		}
	}
	if err := p.End(ctx, req); err != nil {
		t.Fatal(err)
	}
	if raw, ok := annotations(t, c)[v1alpha1.AnnotationExecutorCommand]; ok {
		t.Errorf("order %s still on the NodeFence after End", raw)
	}
	if err := p.End(ctx, req); err != nil {
		t.Errorf("End again, with no order left: %v", err)
	}
	if err := c.Delete(ctx, req.Fence.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := p.End(ctx, req); err != nil {
		t.Errorf("End once the NodeFence is gone: %v", err)
	}
}

// End reads the NodeFence from a cache, which may lag: when the cache still shows the order
// End is for but the NodeFence now holds another (the next method's), End leaves the other.
func TestEndKeepsAnOrderWrittenSince(t *testing.T) {
	req := request(detectors.KubeletDown)
	next := method(req, "executor-2")
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	var stale string // the order annotation the cache shows
	c := fakeclient.NewClientBuilder().WithScheme(s).WithObjects(req.Fence.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil || stale == "" {
				return err
			}
			obj.SetAnnotations(map[string]string{v1alpha1.AnnotationExecutorCommand: stale})
			return nil
		},
	}).Build()
	p := New(&channel{commands: map[string]agentwire.Command{}}, c)
	ctx := context.Background()
	if _, err := p.Fence(ctx, req); err != nil {
		t.Fatal(err)
	}
	stale = annotations(t, c)[v1alpha1.AnnotationExecutorCommand]
	if _, err := p.Fence(ctx, next); err != nil {
		t.Fatal(err)
	}
	err := p.End(ctx, req)
	stale = ""
	if got := order(t, c); got.ID != "f1/executor-2" {
		t.Errorf("End of the first method (error %v) left order %+v; want the next method's, f1/executor-2", err, got)
	}
}

// Two Executor methods of one fence give two orders: after the first failed, the agent
// carries the second out too, and the second's Check never takes the first's answer, nor the
// runtime read-back that came with it, for its own.
func TestTwoExecutorMethodsOfOneFence(t *testing.T) {
	zero := 0
	t.Run("through the API server", func(t *testing.T) {
		a := method(request(detectors.KubeletDown), "executor-a")
		b := method(a, "executor-b")
		c, p := apiWorld(t, a)
		ctx := context.Background()
		if _, err := p.Fence(ctx, a); err != nil {
			t.Fatal(err)
		}
		first := order(t, c)
		answer(t, c, agentwire.APIReport{Executor: agentwire.ExecutorStatus{ID: first.ID, State: agentwire.ExecutorConfirmed}, RunningContainers: &zero})
		if _, err := p.Fence(ctx, b); err != nil {
			t.Fatal(err)
		}
		if second := order(t, c); second.ID == first.ID {
			t.Errorf("methods a and b of one fence both ordered %s: the agent runs an ID once", first.ID)
		}
		if st, err := p.Check(ctx, b); err != nil || st.State != providers.InProgress {
			t.Errorf("Check of b with a's answer on the NodeFence = %+v, %v; want InProgress", st, err)
		}
	})
	t.Run("over the direct channel", func(t *testing.T) {
		a := method(request(detectors.Partitioned), "executor-a")
		b := method(a, "executor-b")
		ch := &channel{commands: map[string]agentwire.Command{}, running: &zero}
		p := New(ch, nil)
		ctx := context.Background()
		if _, err := p.Fence(ctx, a); err != nil {
			t.Fatal(err)
		}
		first := ch.commands["n1"]
		ch.status = &agentwire.ExecutorStatus{ID: first.ID, State: agentwire.ExecutorConfirmed}
		if _, err := p.Fence(ctx, b); err != nil {
			t.Fatal(err)
		}
		if second := ch.commands["n1"]; second.ID == first.ID {
			t.Errorf("methods a and b of one fence both ordered %s: the agent runs an ID once", first.ID)
		}
		if st, err := p.Check(ctx, b); err != nil || st.State != providers.InProgress {
			t.Errorf("Check of b with a's status in the heartbeats = %+v, %v; want InProgress", st, err)
		}
	})
}

// answer writes rep on the NodeFence n1, as its agent would.
func answer(t *testing.T, c client.Client, rep agentwire.APIReport) {
	t.Helper()
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	nf := &v1alpha1.NodeFence{}
	ctx := context.Background()
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	nf.Annotations[v1alpha1.AnnotationExecutorStatus] = string(raw)
	if err := c.Update(ctx, nf); err != nil {
		t.Fatal(err)
	}
}

// End's removal of the order is a write of the NodeFence: the caller's copy (the reconciler's
// record, which its next status write sends) takes that write's resourceVersion, or the write
// after End (the chain's next method, the release's record) would be refused as stale.
func TestEndLeavesTheCallersCopyCurrent(t *testing.T) {
	req := request(detectors.KubeletDown)
	c, p := apiWorld(t, req)
	ctx := context.Background()
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, req.Fence); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Fence(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, req.Fence); err != nil { // the record as the reconciler holds it
		t.Fatal(err)
	}
	if err := p.End(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Fence.Status.Phase = v1alpha1.PhaseFencing
	if err := c.Update(ctx, req.Fence); err != nil { // the fake holds no status subresource: the same resourceVersion check
		t.Errorf("the caller's write after End: %v", err)
	}
	if _, ok := req.Fence.Annotations[v1alpha1.AnnotationExecutorCommand]; ok {
		t.Errorf("the caller's copy still shows the order End removed")
	}
}

// A fence under way through an upgrade: the controller before orders named their method sent
// the fence's UID alone, and its agent answered under it. The chain's first Executor method
// takes that answer as its own, and End takes that order back; a later Executor method of the
// chain does neither (the agent ran one order per fence UID: it never ran the later one).
func TestOrderOfAControllerBeforeOrderIDs(t *testing.T) {
	zero := 0
	a := method(request(detectors.KubeletDown), "executor-a")
	a.Fence.Status.Steps = []v1alpha1.Step{{Name: v1alpha1.StepTerminate, Method: "executor-a", State: v1alpha1.StepSucceeded}}
	b := method(a, "executor-b")
	c, p := apiWorld(t, a)
	ctx := context.Background()
	legacy, _ := json.Marshal(agentwire.Command{ID: "f1", Action: agentwire.ActionTerminate, Token: 41})
	nf := &v1alpha1.NodeFence{}
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	nf.Annotations = map[string]string{v1alpha1.AnnotationExecutorCommand: string(legacy)}
	if err := c.Update(ctx, nf); err != nil {
		t.Fatal(err)
	}
	answer(t, c, agentwire.APIReport{Executor: agentwire.ExecutorStatus{ID: "f1", State: agentwire.ExecutorConfirmed}, RunningContainers: &zero})
	if st, err := p.Check(ctx, a); err != nil || st.State != providers.Confirmed {
		t.Errorf("Check of the first method with the agent's answer to the old order = %+v, %v; want Confirmed", st, err)
	}
	if st, err := p.Check(ctx, b); err != nil || st.State != providers.InProgress {
		t.Errorf("Check of a later method with that answer = %+v, %v; want InProgress", st, err)
	}
	if err := p.End(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got := order(t, c); got.ID != "f1" {
		t.Errorf("End of a later method took the old order back: %+v", got)
	}
	if err := p.End(ctx, a); err != nil {
		t.Fatal(err)
	}
	if raw, ok := annotations(t, c)[v1alpha1.AnnotationExecutorCommand]; ok {
		t.Errorf("the old order %s is still on the NodeFence after End of the method it ran for", raw)
	}
}

// TestConfirmedSaysWhatTheAgentCut: a Confirmed check carries the agent's message (the pods
// whose grace period its time limit cut) after its own account, so that the NodeFence's step
// says the pods did not all stop as the kubelet would have stopped them.
func TestConfirmedSaysWhatTheAgentCut(t *testing.T) {
	const cut = "the time limit (--executor-timeout 2m0s) cut the grace period of 1 pod: db/db-0 cut from 300s to 105s"
	zero := 0
	for _, tc := range []struct{ message, want string }{
		{"", "the agent confirms no workload container runs: 2 pods, 3 containers stopped, its kubelet stopped first; runtime read-back: none running"},
		{cut, "the agent confirms no workload container runs: 2 pods, 3 containers stopped, its kubelet stopped first; runtime read-back: none running; but " + cut},
	} {
		st := agentwire.ExecutorStatus{ID: "f1/executor", State: agentwire.ExecutorConfirmed, Message: tc.message, Pods: 2, Containers: 3, KubeletStopped: true, BootID: "boot-2"}
		got := judge(st, &zero)
		if got.State != providers.Confirmed || got.Message != tc.want {
			t.Errorf("message %q: %s %q, want %s %q", tc.message, got.State, got.Message, providers.Confirmed, tc.want)
		}
		if got.BootID != "boot-2" { // recorded with the confirmation: the boot the executor acted in
			t.Errorf("the confirmation's boot ID %q, want the agent's answer's, boot-2", got.BootID)
		}
	}
}
