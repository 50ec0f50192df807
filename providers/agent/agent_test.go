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
func (c *channel) ClearCommand(node string)                      { delete(c.commands, node) }
func (c *channel) ExecutorStatus(string) (agentwire.ExecutorStatus, bool) {
	if c.status == nil {
		return agentwire.ExecutorStatus{}, false
	}
	return *c.status, true
}
func (c *channel) Latest(node string) (agentwire.Heartbeat, []agentwire.Sighting, bool) {
	return agentwire.LatestOf(map[string]agentwire.Heartbeat{"n1": {Node: "n1", RunningContainers: c.running}}, node)
}

func request(verdict detectors.Verdict) providers.Request {
	return providers.Request{Fence: &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "f1"},
		Spec:   v1alpha1.NodeFenceSpec{NodeName: "n1", Verdict: string(verdict)},
		Status: v1alpha1.NodeFenceStatus{Token: 41}}}
}

// Over the direct channel: the order is served until End, and only a confirmed report with a
// runtime read-back of no container confirms.
func TestDirectOrder(t *testing.T) {
	ch := &channel{commands: map[string]agentwire.Command{}}
	p := New(ch, nil)
	req := request(detectors.Partitioned)
	ctx := context.Background()
	st, err := p.Fence(ctx, req)
	if err != nil || ch.commands["n1"].ID != "f1" || ch.commands["n1"].Token != 41 {
		t.Fatalf("Fence = %+v, %v; commands %v; want order f1 with the fence's token 41", st, err, ch.commands)
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
		{"running", &agentwire.ExecutorStatus{ID: "f1", State: agentwire.ExecutorRunning}, &two, providers.InProgress, ""},
		{"done without read-back", &agentwire.ExecutorStatus{ID: "f1", State: agentwire.ExecutorConfirmed}, nil, providers.InProgress, ""},
		{"done, containers still running", &agentwire.ExecutorStatus{ID: "f1", State: agentwire.ExecutorConfirmed}, &two, providers.InProgress, ""},
		{"done, none running", &agentwire.ExecutorStatus{ID: "f1", State: agentwire.ExecutorConfirmed}, &zero, providers.Confirmed, ""},
		{"failed", &agentwire.ExecutorStatus{ID: "f1", State: agentwire.ExecutorFailed, Message: "no runtime"}, &zero, providers.Failed, providers.ReasonExecutorFailed},
		{"refused: stale token", &agentwire.ExecutorStatus{ID: "f1", State: agentwire.ExecutorFailed, Reason: agentwire.ReasonStaleToken, Message: "refused"}, &zero,
			providers.Failed, providers.ReasonStaleToken},
		{"refused: token not recorded", &agentwire.ExecutorStatus{ID: "f1", State: agentwire.ExecutorFailed, Reason: agentwire.ReasonTokenNotRecorded, Message: "refused"}, &zero,
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
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	req := request(detectors.KubeletDown)
	c := fakeclient.NewClientBuilder().WithScheme(s).WithObjects(req.Fence.DeepCopy()).Build()
	p := New(&channel{commands: map[string]agentwire.Command{}}, c)
	ctx := context.Background()
	if _, err := p.Fence(ctx, req); err != nil {
		t.Fatal(err)
	}
	nf := &v1alpha1.NodeFence{}
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	var cmd agentwire.Command
	if err := json.Unmarshal([]byte(nf.Annotations[v1alpha1.AnnotationExecutorCommand]), &cmd); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(agentwire.Command{ID: "f1", Action: agentwire.ActionTerminate, Token: 41}, cmd); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if st, err := p.Check(ctx, req); err != nil || st.State != providers.InProgress {
		t.Errorf("Check before an answer = %+v, %v; want InProgress", st, err)
	}
}
