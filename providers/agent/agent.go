package agent

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// Name is the provider's name.
const Name = "agent"

// Channel is what the provider needs of detectors/channel.Server.
type Channel interface {
	SetCommand(node string, cmd agentwire.Command)
	ExecutorStatus(node string) (agentwire.ExecutorStatus, bool)
	Snapshot() map[string]agentwire.Heartbeat
}

// Provider implements providers.WorkloadTerminator over the direct Channel and, for orders
// ViaAPI, over the annotations of the node's NodeFence (named after the node).
type Provider struct {
	ch  Channel
	api client.Client
}

var _ providers.WorkloadTerminator = (*Provider)(nil)

// New returns a provider over ch and, for orders through the API server, api (nil: such
// orders fail with an error saying so).
func New(ch Channel, api client.Client) *Provider { return &Provider{ch: ch, api: api} }

// Name implements providers.WorkloadTerminator.
func (p *Provider) Name() string { return Name }

// Terminate hands the order to the agent: ViaDirect in the answer to its next heartbeat,
// ViaAPI in the palisade.dev/executor-command annotation of the node's NodeFence, which the
// agent watches. The agent runs an ID once.
func (p *Provider) Terminate(ctx context.Context, o providers.TerminateOrder) error {
	cmd := agentwire.Command{ID: o.ID, Action: agentwire.ActionTerminate, GracePeriodSeconds: o.GracePeriodSeconds}
	if o.Via != providers.ViaAPI {
		p.ch.SetCommand(o.Node, cmd)
		return nil
	}
	if p.api == nil {
		return fmt.Errorf("no API client to order the agent of node %s through the API server", o.Node)
	}
	raw, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	nf := &v1alpha1.NodeFence{}
	if err := p.api.Get(ctx, client.ObjectKey{Name: o.Node}, nf); err != nil {
		return fmt.Errorf("reading the NodeFence of node %s: %w", o.Node, err)
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
		return fmt.Errorf("writing the order into the NodeFence of node %s: %w", o.Node, err)
	}
	return nil
}

// Termination reads the agent's account of the order and the runtime read-back that came with
// it, on the order's channel.
func (p *Provider) Termination(ctx context.Context, o providers.TerminateOrder) (providers.TerminationState, string, error) {
	if o.Via != providers.ViaAPI {
		st, ok := p.ch.ExecutorStatus(o.Node)
		if !ok || st.ID != o.ID {
			return providers.TerminationPending, "the agent has not taken the order yet", nil
		}
		var running *int
		if hb, ok := p.ch.Snapshot()[o.Node]; ok {
			running = hb.RunningContainers
		}
		state, msg := judge(st, running)
		return state, msg, nil
	}
	if p.api == nil {
		return "", "", fmt.Errorf("no API client to read the agent of node %s through the API server", o.Node)
	}
	nf := &v1alpha1.NodeFence{}
	if err := p.api.Get(ctx, client.ObjectKey{Name: o.Node}, nf); err != nil {
		if apierrors.IsNotFound(err) {
			return providers.TerminationPending, "the NodeFence is gone", nil
		}
		return "", "", fmt.Errorf("reading the NodeFence of node %s: %w", o.Node, err)
	}
	raw, ok := nf.Annotations[v1alpha1.AnnotationExecutorStatus]
	if !ok {
		return providers.TerminationPending, "the agent has not answered through the API server yet", nil
	}
	rep, err := agentwire.ParseAPIReport(raw)
	if err != nil {
		// A malformed answer is no confirmation; the method's timeout ends the wait.
		return providers.TerminationRunning, "ignoring the agent's answer: " + err.Error(), nil
	}
	if rep.Executor.ID != o.ID {
		return providers.TerminationPending, fmt.Sprintf("the agent's latest answer is for another order (%s)", rep.Executor.ID), nil
	}
	state, msg := judge(rep.Executor, rep.RunningContainers)
	return state, msg, nil
}

// judge turns the agent's status and the runtime read-back taken with it into a state: Confirmed
// only when the agent says so and the read-back shows no workload container running.
func judge(st agentwire.ExecutorStatus, running *int) (providers.TerminationState, string) {
	switch st.State {
	case agentwire.ExecutorFailed:
		return providers.TerminationFailed, st.Message
	case agentwire.ExecutorRunning:
		return providers.TerminationRunning, "the agent is terminating the workload"
	}
	if running == nil {
		return providers.TerminationRunning, "the agent reports done; waiting for its runtime read-back"
	}
	if *running > 0 {
		return providers.TerminationRunning, fmt.Sprintf("the agent reports done but its runtime read-back shows %d workload containers running", *running)
	}
	return providers.TerminationConfirmed, fmt.Sprintf("%d pods, %d containers stopped; runtime read-back: none running", st.Pods, st.Containers)
}
