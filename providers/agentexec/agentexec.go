package agentexec

import (
	"context"
	"fmt"

	"palisade.dev/palisade/detectors/agent"
	"palisade.dev/palisade/providers"
)

// Name is the provider's name.
const Name = "agent"

// Channel is what the provider needs of detectors/agent.Server.
type Channel interface {
	SetCommand(node string, cmd agent.Command)
	ExecutorStatus(node string) (agent.ExecutorStatus, bool)
	Snapshot() map[string]agent.Heartbeat
}

// Provider implements providers.WorkloadTerminator over a Channel.
type Provider struct{ ch Channel }

var _ providers.WorkloadTerminator = (*Provider)(nil)

// New returns a provider over ch.
func New(ch Channel) *Provider { return &Provider{ch: ch} }

// Name implements providers.WorkloadTerminator.
func (p *Provider) Name() string { return Name }

// Terminate sets the command; the agent picks it up with its next heartbeat and runs an ID once.
func (p *Provider) Terminate(_ context.Context, node, id string, grace *int64) error {
	p.ch.SetCommand(node, agent.Command{ID: id, Action: agent.ActionTerminate, GracePeriodSeconds: grace})
	return nil
}

// Termination reads the agent's account of id and the runtime read-back of its heartbeats.
func (p *Provider) Termination(_ context.Context, node, id string) (providers.TerminationState, string, error) {
	st, ok := p.ch.ExecutorStatus(node)
	if !ok || st.ID != id {
		return providers.TerminationPending, "the agent has not taken the order yet", nil
	}
	switch st.State {
	case agent.ExecutorFailed:
		return providers.TerminationFailed, st.Message, nil
	case agent.ExecutorRunning:
		return providers.TerminationRunning, "the agent is terminating the workload", nil
	}
	hb, ok := p.ch.Snapshot()[node]
	if !ok || hb.RunningContainers == nil {
		return providers.TerminationRunning, "the agent reports done; waiting for its runtime read-back", nil
	}
	if n := *hb.RunningContainers; n > 0 {
		return providers.TerminationRunning, fmt.Sprintf("the agent reports done but its runtime read-back shows %d workload containers running", n), nil
	}
	return providers.TerminationConfirmed, fmt.Sprintf("%d pods, %d containers stopped; runtime read-back: none running", st.Pods, st.Containers), nil
}
