package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// SelfFenceName is the self-fence provider's name.
const SelfFenceName = "self-fence"

// Signals tells when a node last sent a signal on any path, and which other nodes' agents are
// silent (detectors/observe.Observer).
type Signals interface {
	LastSignal(ctx context.Context, node string, now time.Time) (time.Time, error)
	// SilentAgents names the nodes other than node whose agent the controller heard but has
	// lost (missed heartbeats), at now.
	SilentAgents(node string, now time.Time) []string
	// SelfFenceWithin is what the node's agent said in its latest heartbeat: how long after
	// the node was last reached it has fenced itself at the latest (0: it does not fence
	// itself), and its heartbeat interval; heard is false when the controller has heard none.
	SelfFenceWithin(node string) (within, interval time.Duration, heard bool)
	// AgentLastAlive is the latest moment the node's agent is known to have run: its latest
	// heartbeat's arrival, or a peer's acknowledgement of its probe (zero: never).
	AgentLastAlive(node string) time.Time
}

// selfFenceMargin is how many of the agent's heartbeat intervals safeAfter must leave beyond
// the agent's own time to fence itself: the wait starts once the controller has judged the
// node silent on every path, and the agent may have been reached up to that many intervals
// later than the controller heard (a peer's acknowledgement in flight, the agent noticing its
// isolation at its next heartbeat).
const selfFenceMargin = 4

// agentSilentSlack is how much longer than selfFenceMargin intervals the node's last sign of life
// may follow its agent's before the agent counts as stopped before its node (armed): a Lease
// renewal made before the cut may reach the controller seconds late through a loaded API server.
const agentSilentSlack = 5 * time.Second

// armed fails the method, saying why, unless the node's agent said that it fences itself once
// cut off, within safeAfter less selfFenceMargin intervals: an agent never heard, one with
// self-fencing off (--self-fence-after 0, the chart's default) or without a petted watchdog,
// or one that takes longer, does not make the node's silence a fence. Nor does an agent that
// fell silent more than selfFenceMargin intervals (and agentSilentSlack) before the node's last
// sign of life (last):
// its node ran on without it (its Lease renewed, a peer reached it), so it had stopped (crashed,
// killed, its pod gone) before its node was cut off, and a stopped agent fences nothing.
func (s *SelfFence) armed(req providers.Request, settings *v1alpha1.SelfFenceMethod, last time.Time) *providers.Status {
	within, interval, heard := s.signals.SelfFenceWithin(req.Node())
	alive := s.signals.AgentLastAlive(req.Node())
	failed := func(format string, args ...any) *providers.Status {
		return &providers.Status{State: providers.Failed, Reason: providers.ReasonSelfFenceNotArmed,
			Message: fmt.Sprintf(format, args...) + "; the chain goes on (a power or storage method can fence it)"}
	}
	switch safe := settings.SafeAfter.Duration; {
	case !heard:
		return failed("the controller has heard no heartbeat of node %s's agent since it started, so nothing says that the agent fences itself once cut off: its silence is not relied on", req.Node())
	case within <= 0:
		return failed("node %s's agent does not promise to fence itself (its --self-fence-after is 0, the chart's agent.selfFenceAfter, or it pets no watchdog: --watchdog-device with --watchdog-timeout, the chart's agent.watchdogDevice and agent.watchdogTimeout, a hardware watchdog or the softdog module's; without one an agent that stops after its node was cut off fences nothing): its silence is not a fence", req.Node())
	case within+selfFenceMargin*interval > safe:
		return failed("node %s's agent fences itself up to %s after it was last reached (--self-fence-after plus --watchdog-timeout), which with %d heartbeat intervals of %s exceeds the method's safeAfter %s: raise safeAfter to at least %s, or lower the agents' --self-fence-after",
			req.Node(), within, selfFenceMargin, interval, safe, within+selfFenceMargin*interval)
	case !last.IsZero() && last.Sub(alive) > selfFenceMargin*interval+agentSilentSlack:
		return &providers.Status{State: providers.Failed, Reason: providers.ReasonAgentSilentBeforeNode,
			Message: fmt.Sprintf("node %s's agent was last known to run at %s (its heartbeat, or a peer acknowledging its probe), %s before the node's last sign of life at %s (its Lease, a peer reaching it): the agent stopped (crashed, killed, its pod gone) before its node was cut off, and a stopped agent fences nothing, so the node's silence is not a fence; the chain goes on (a power or storage method can fence it)",
				req.Node(), timeOrNever(alive), last.Sub(alive).Round(100*time.Millisecond), last.UTC().Format(time.RFC3339))}
	}
	return nil
}

// timeOrNever is t in RFC 3339, or "never" for the zero time.
func timeOrNever(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// SelfFence is the SelfFence method: it relies on the node's agent fencing itself once cut off
// from everything, and confirms when the node has sent no signal on any path for the method's
// safeAfter, counted from the wait's start. A signal newer than the wait's start means the node
// is back and cannot be relied on.
//
// Not from the last signal the controller knows: it keeps only each peer's latest report, so
// once the node's peers fail to reach it, the moments they still reached it are forgotten. A
// node that was Partitioned (cut from the controller and the API server, its peers reaching it)
// for minutes and then lost its peers has its last known signal minutes back, while its agent,
// which reached those peers until then, has only just begun to count its isolation. The wait
// starts after the node was judged silent on every path, so after the last reach by a peer.
type SelfFence struct {
	signals Signals
}

var _ providers.Fencer = (*SelfFence)(nil)

// NewSelfFence returns the self-fence provider over signals.
func NewSelfFence(signals Signals) *SelfFence { return &SelfFence{signals: signals} }

// Name is "self-fence".
func (s *SelfFence) Name() string { return SelfFenceName }

// Fence notes the node's last signal; the safe time counts from the wait's start (Check). It
// fails at once when the node's agent does not fence itself in time (armed).
func (s *SelfFence) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	settings, last, err := s.lastSignal(ctx, req)
	if err != nil {
		return providers.Status{}, err
	}
	if st := s.armed(req, settings, last); st != nil {
		return *st, nil
	}
	return providers.Status{State: providers.InProgress, Message: fmt.Sprintf("relying on the node's self-fence: last signal at %s; safe %s after the wait for its isolation begins",
		last.UTC().Format(time.RFC3339), settings.SafeAfter.Duration)}, nil
}

// lastSignal is the method's settings and the node's freshest signal on any path.
func (s *SelfFence) lastSignal(ctx context.Context, req providers.Request) (*v1alpha1.SelfFenceMethod, time.Time, error) {
	settings := req.Method.SelfFence
	if settings == nil {
		return nil, time.Time{}, providers.NewError(providers.ReasonBadTarget, fmt.Errorf("method %s has no selfFence settings", req.Method.Name))
	}
	last, err := s.signals.LastSignal(ctx, req.Node(), req.Now)
	if err != nil {
		return nil, time.Time{}, providers.NewError(providers.ReasonAPIError, err)
	}
	return settings, last, nil
}

// Check confirms once the node has been silent on every path for safeAfter.
func (s *SelfFence) Check(ctx context.Context, req providers.Request) (providers.Status, error) {
	settings, last, err := s.lastSignal(ctx, req)
	if err != nil {
		return providers.Status{}, err
	}
	started := awaitStart(req.Fence)
	if last.After(started) {
		return providers.Status{State: providers.Failed, Reason: providers.ReasonNodeReachable,
			Message: fmt.Sprintf("node %s sent a signal at %s after the self-fence wait began: it cannot be relied on to have fenced itself", req.Node(), last.UTC().Format(time.RFC3339))}, nil
	}
	safe, silent := settings.SafeAfter.Duration, req.Now.Sub(started)
	lastSeen := "no signal from it known"
	if !last.IsZero() {
		lastSeen = "its last known signal at " + last.UTC().Format(time.RFC3339)
	}
	if silent >= safe {
		if st := s.armed(req, settings, last); st != nil {
			return *st, nil // its agent restarted without self-fencing, or stopped, before the silence
		}
		// An island: nodes cut off together from the controller and the API server, reaching
		// each other. Their agents each reach a peer, so none counts itself isolated or fences
		// itself, while the controller hears none of them. Another silent agent may be such a
		// peer: then the silence says nothing of a self-fence.
		if others := s.signals.SilentAgents(req.Node(), req.Now); len(others) > 0 {
			return providers.Status{State: providers.Failed, Reason: providers.ReasonOtherAgentsSilent,
				Message: fmt.Sprintf("node %s has been silent for %s (safeAfter %s), but the agents of %s are silent too: nodes cut off together may reach each other, and an agent that reaches a peer does not fence itself, so the silence does not show a self-fence; the chain goes on (a power or storage method can fence it)",
					req.Node(), silent.Round(100*time.Millisecond), safe, namesOf(others))}, nil
		}
		return providers.Status{State: providers.Confirmed,
			Message: fmt.Sprintf("relied on the node's self-fence: no signal from it on any path for %s since the wait began at %s (safeAfter %s; %s)",
				silent.Round(100*time.Millisecond), started.UTC().Format(time.RFC3339), safe, lastSeen)}, nil
	}
	if req.Expired {
		return providers.Status{State: providers.Failed, Reason: providers.ReasonTimedOut,
			Message: fmt.Sprintf("the self-fence's safe time %s did not pass within the method's timeout", safe)}, nil
	}
	return providers.Status{State: providers.InProgress, Reason: providers.ReasonWaitingForSafeTime, RetryAfter: min(safe-silent, time.Second),
		Message: fmt.Sprintf("no signal for %s of the %s safe time, counted from the wait's start at %s (%s)",
			silent.Round(100*time.Millisecond), safe, started.UTC().Format(time.RFC3339), lastSeen)}, nil
}

// End does nothing: the node's agent fences itself on its own.
func (s *SelfFence) End(context.Context, providers.Request) error { return nil }

// awaitStart is when the latest AwaitIsolation step began (fencing records one before
// ConfirmSelfFenced).
func awaitStart(nf *v1alpha1.NodeFence) time.Time {
	for i := len(nf.Status.Steps) - 1; i >= 0; i-- {
		if nf.Status.Steps[i].Name == v1alpha1.StepAwaitIsolation {
			return nf.Status.Steps[i].StartTime.Time
		}
	}
	return time.Time{}
}

// maxNamed is how many nodes a message names.
const maxNamed = 3

// namesOf is "node a", "nodes a, b" or "nodes a, b, c and 4 more".
func namesOf(nodes []string) string {
	if len(nodes) == 1 {
		return "node " + nodes[0]
	}
	if len(nodes) <= maxNamed {
		return "nodes " + strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("nodes %s and %d more", strings.Join(nodes[:maxNamed], ", "), len(nodes)-maxNamed)
}
