package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/providers"
)

// Name is the provider's name.
const Name = "agent"

// retryCheck is how often an order's state is read back.
const retryCheck = 500 * time.Millisecond

// Channel is what the provider needs of channel.Server.
type Channel interface {
	SetCommand(node string, cmd agentwire.Command)
	ClearCommand(node, id string)
	ExecutorStatus(node string) (agentwire.ExecutorStatus, bool)
	Latest(node string) (hb agentwire.Heartbeat, about []agentwire.Sighting, ok bool)
}

// Via is the channel an order travels to a node's agent.
type Via string

const (
	// ViaDirect: in the answer to the agent's next heartbeat, straight from the controller (a
	// node cut off from the API server).
	ViaDirect Via = "direct"
	// ViaAPI: through the API server, on the node's NodeFence (a node whose kubelet is down but
	// whose agent sees the API server).
	ViaAPI Via = "api"
)

// Provider is the Executor method: it hands a Terminate order to the node's agent over the
// direct Channel or, for a node whose kubelet is down, through the annotations of the node's
// NodeFence (named after the node), and reads the agent's account back on the same channel.
type Provider struct {
	ch  Channel
	api client.Client
}

var _ providers.Fencer = (*Provider)(nil)

// New returns a provider over ch and, for orders through the API server, api (nil: such
// orders fail with an error saying so).
func New(ch Channel, api client.Client) *Provider { return &Provider{ch: ch, api: api} }

// Name is "agent".
func (p *Provider) Name() string { return Name }

// ViaFor is the order's channel: through the API server for a node whose kubelet is down (its
// agent sees the API server), straight from the controller otherwise (a partitioned node
// cannot see the API server; a manual request may concern either).
func ViaFor(nf *v1alpha1.NodeFence) Via {
	if nf.Spec.Verdict == string(detectors.KubeletDown) {
		return ViaAPI
	}
	return ViaDirect
}

// OrderID names the order of req's method in req's fence: "<fence UID>/<method name>". A
// resumed controller re-sends the same ID, which the agent runs once; two Executor methods of
// one fence send two IDs, so that the second is carried out too and its Check never takes the
// first one's account (or its runtime read-back) for its own.
func OrderID(req providers.Request) string { return req.ID() + "/" + req.Method.Name }

// ours says whether id, from an agent's account or an order annotation, is the order of req's
// method: OrderID, or the fence's UID alone as a controller before OrderID named its orders (a
// fence under way through an upgrade), taken for the chain's first Executor method only, the
// one such a controller's order could have been carried out for (the agent ran one order per
// fence UID).
func ours(id string, req providers.Request) bool {
	if id == OrderID(req) {
		return true
	}
	if id != req.ID() {
		return false
	}
	for _, s := range req.Fence.Status.Steps {
		if s.Name == v1alpha1.StepTerminate {
			return s.Method == req.Method.Name
		}
	}
	return false
}

// Fence hands the order to the agent: ViaDirect in the answer to its next heartbeat, ViaAPI in
// the palisade.dev/executor-command annotation of the node's NodeFence, which the agent
// watches. The order's ID is OrderID. The order carries the fence's fencing token, and the
// agent refuses it when it already took a later fence's.
func (p *Provider) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	cmd := agentwire.Command{ID: OrderID(req), Action: agentwire.ActionTerminate, Token: req.Fence.Status.Token}
	if s := req.Method.Executor; s != nil {
		cmd.GracePeriodSeconds = s.GracePeriodSeconds
	}
	via := ViaFor(req.Fence)
	if via == ViaDirect {
		p.ch.SetCommand(req.Node(), cmd)
	} else if err := p.annotate(ctx, req.Node(), cmd); err != nil {
		return providers.Status{}, err
	}
	return providers.Status{State: providers.InProgress,
		Message: fmt.Sprintf("termination ordered (fencing token %d) from the agent of node %s %s", cmd.Token, req.Node(), viaText(via))}, nil
}

func viaText(v Via) string {
	if v == ViaAPI {
		return "through the API server (annotation " + v1alpha1.AnnotationExecutorCommand + " on this NodeFence)"
	}
	return "over the direct channel (the answer to its next heartbeat)"
}

// annotate writes the order into the node's NodeFence.
func (p *Provider) annotate(ctx context.Context, node string, cmd agentwire.Command) error {
	if p.api == nil {
		return providers.NewError(providers.ReasonBadTarget, fmt.Errorf("no API client to order the agent of node %s through the API server", node))
	}
	raw, err := json.Marshal(cmd)
	if err != nil {
		return fmt.Errorf("encoding the order for node %s: %w", node, err)
	}
	nf := &v1alpha1.NodeFence{}
	if err := p.api.Get(ctx, client.ObjectKey{Name: node}, nf); err != nil {
		return providers.NewError(providers.ReasonAPIError, fmt.Errorf("reading the NodeFence of node %s: %w", node, err))
	}
	if nf.Annotations[v1alpha1.AnnotationExecutorCommand] == string(raw) {
		return nil
	}
	patch := client.MergeFrom(nf.DeepCopy())
	if nf.Annotations == nil {
		nf.Annotations = map[string]string{}
	}
	nf.Annotations[v1alpha1.AnnotationExecutorCommand] = string(raw)
	if err := p.api.Patch(ctx, nf, patch); err != nil {
		return providers.NewError(providers.ReasonAPIError, fmt.Errorf("writing the order into the NodeFence of node %s: %w", node, err))
	}
	return nil
}

// Check reads the agent's account of the order and the runtime read-back that came with it,
// on the order's channel. A report alone is no confirmation.
func (p *Provider) Check(ctx context.Context, req providers.Request) (providers.Status, error) {
	st, running, pending, err := p.report(ctx, req)
	if err != nil || pending != "" {
		return providers.Status{State: providers.InProgress, Reason: providers.ReasonOrderPending, Message: pending, RetryAfter: retryCheck}, err
	}
	out := judge(st, running)
	if out.State == providers.Failed {
		out.Message = fmt.Sprintf("the agent of node %s could not terminate the workload: %s", req.Node(), st.Message)
	}
	return out, nil
}

// report is the agent's latest account of the order; pending, when set, says why there is none.
func (p *Provider) report(ctx context.Context, req providers.Request) (agentwire.ExecutorStatus, *int, string, error) {
	node := req.Node()
	if ViaFor(req.Fence) == ViaDirect {
		st, ok := p.ch.ExecutorStatus(node)
		if !ok || !ours(st.ID, req) {
			return st, nil, "the agent has not taken the order yet", nil
		}
		var running *int
		if hb, _, ok := p.ch.Latest(node); ok {
			running = hb.RunningContainers
		}
		return st, running, "", nil
	}
	if p.api == nil {
		return agentwire.ExecutorStatus{}, nil, "", providers.NewError(providers.ReasonBadTarget, fmt.Errorf("no API client to read the agent of node %s through the API server", node))
	}
	nf := &v1alpha1.NodeFence{}
	if err := p.api.Get(ctx, client.ObjectKey{Name: node}, nf); err != nil {
		if apierrors.IsNotFound(err) {
			return agentwire.ExecutorStatus{}, nil, "the NodeFence is gone", nil
		}
		return agentwire.ExecutorStatus{}, nil, "", providers.NewError(providers.ReasonAPIError, fmt.Errorf("reading the NodeFence of node %s: %w", node, err))
	}
	raw, ok := nf.Annotations[v1alpha1.AnnotationExecutorStatus]
	if !ok {
		return agentwire.ExecutorStatus{}, nil, "the agent has not answered through the API server yet", nil
	}
	rep, err := agentwire.ParseAPIReport(raw)
	if err != nil {
		// A malformed answer is no confirmation; the method's timeout ends the wait.
		return agentwire.ExecutorStatus{}, nil, "ignoring the agent's answer: " + err.Error(), nil
	}
	if !ours(rep.Executor.ID, req) {
		return rep.Executor, nil, fmt.Sprintf("the agent's latest answer is for another order (%s)", rep.Executor.ID), nil
	}
	return rep.Executor, rep.RunningContainers, "", nil
}

// End takes the order back: the method is over (it failed, or its fence ended). It stops
// serving it on the direct channel (another order set since stays) and removes it from the node's NodeFence, which outlives
// the fence: left there, it would be carried out again by an agent restarted after the fence
// (its record of the orders it ran is in memory, and the order's fencing token is still the
// highest it took), terminating the workload of a node back in service. The NodeFence is read
// from the client's cache, so that End costs no API call when there is no order to remove.
func (p *Provider) End(ctx context.Context, req providers.Request) error {
	id := "" // a NodeFence deleted before its end: no order of the node is served any more
	if req.ID() != "" {
		id = OrderID(req)
	}
	p.ch.ClearCommand(req.Node(), id)
	return p.unannotate(ctx, req)
}

// unannotate removes req's order from the node's NodeFence, if it is there. The JSON patch
// tests the NodeFence's UID and the annotation's value first, so that it never removes
// another fence's order, nor another method's written since the read; when a test fails, the
// NodeFence is read again. A NodeFence that is gone holds nothing to remove, and a request
// without a fence UID (a NodeFence deleted before its end) has no order on a live one.
func (p *Provider) unannotate(ctx context.Context, req providers.Request) error {
	if p.api == nil || req.Fence.UID == "" {
		return nil
	}
	node, id := req.Node(), OrderID(req)
	var err error
	for range 3 {
		nf := &v1alpha1.NodeFence{}
		if gerr := p.api.Get(ctx, client.ObjectKey{Name: node}, nf); gerr != nil {
			if apierrors.IsNotFound(gerr) {
				return nil
			}
			return providers.NewError(providers.ReasonAPIError, fmt.Errorf("reading the NodeFence of node %s: %w", node, gerr))
		}
		raw, ok := nf.Annotations[v1alpha1.AnnotationExecutorCommand]
		if !ok || nf.UID != req.Fence.UID || !holdsOrder(raw, req) {
			return nil
		}
		// Only from this NodeFence, and only while it holds this order: the API server refuses
		// the patch (422) otherwise.
		err = p.api.Patch(ctx, nf, client.RawPatch(types.JSONPatchType, v1alpha1.AnnotationRemoval(nf.UID, map[string]string{v1alpha1.AnnotationExecutorCommand: raw})))
		if err == nil {
			// The caller's copy of the NodeFence (the reconciler's record, req.Fence) is one
			// write behind now: it takes this write's resourceVersion, so that its next status
			// write is not refused for it (only the controller writes the status).
			req.Fence.ResourceVersion = nf.ResourceVersion
			delete(req.Fence.Annotations, v1alpha1.AnnotationExecutorCommand)
			return nil
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
	}
	return providers.NewError(providers.ReasonAPIError, fmt.Errorf("removing order %s from the NodeFence of node %s: %w", id, node, err))
}

// holdsOrder says whether raw, an order annotation, is the order of req's method (ours).
func holdsOrder(raw string, req providers.Request) bool {
	var cmd agentwire.Command
	return json.Unmarshal([]byte(raw), &cmd) == nil && ours(cmd.ID, req)
}

// judge turns the agent's status and the runtime read-back taken with it into a Status:
// Confirmed only when the agent says so and the read-back shows no workload container running.
func judge(st agentwire.ExecutorStatus, running *int) providers.Status {
	inProgress := func(format string, args ...any) providers.Status {
		return providers.Status{State: providers.InProgress, Reason: providers.ReasonOrderRunning, Message: fmt.Sprintf(format, args...), RetryAfter: retryCheck}
	}
	switch st.State {
	case agentwire.ExecutorFailed:
		reason := providers.ReasonExecutorFailed
		switch st.Reason {
		case agentwire.ReasonStaleToken:
			reason = providers.ReasonStaleToken
		case agentwire.ReasonTokenNotRecorded:
			reason = providers.ReasonTokenNotRecorded
		}
		return providers.Status{State: providers.Failed, Reason: reason, Message: st.Message}
	case agentwire.ExecutorRunning:
		return inProgress("the agent is terminating the workload")
	}
	if running == nil {
		return inProgress("the agent reports done; waiting for its runtime read-back")
	}
	if *running > 0 {
		return inProgress("the agent reports done but its runtime read-back shows %d workload containers running", *running)
	}
	kubelet := "its kubelet was not stopped (no --kubelet-stop-command)"
	if st.KubeletStopped {
		kubelet = "its kubelet stopped first"
	}
	msg := fmt.Sprintf("the agent confirms no workload container runs: %d pods, %d containers stopped, %s; runtime read-back: none running", st.Pods, st.Containers, kubelet)
	if st.Message != "" {
		msg += "; but " + st.Message // grace periods its time limit cut
	}
	return providers.Status{State: providers.Confirmed, Message: msg, BootID: st.BootID}
}
