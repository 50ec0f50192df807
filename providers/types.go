package providers

import (
	"context"
	"errors"
	"fmt"
)

// PowerState is what a BMC or cloud API reports.
type PowerState string

const (
	PowerOn      PowerState = "On"
	PowerOff     PowerState = "Off"
	PowerUnknown PowerState = "Unknown"
)

// Target is the machine behind one node, with the credentials to reach it. Credentials come
// from a Secret and must never be logged or written to an event or a status.
type Target struct {
	// Node is the Kubernetes node name, for logs and errors.
	Node string
	// Address is "host" or "host:port".
	Address  string
	Username string
	Password string
	// CipherSuite is the IPMI cipher suite, "" for the provider's default.
	CipherSuite string
}

// String never prints the credentials.
func (t Target) String() string { return fmt.Sprintf("%s (%s)", t.Node, t.Address) }

// PowerFencer powers a machine off and reads its power state back.
//
// Contract: PowerOff is idempotent: calling it on a machine that is already off succeeds. A nil
// error from PowerOff means only that the command was accepted, never that the machine is off:
// the caller confirms with PowerState. A timeout or an unreachable BMC means the command may or
// may not have taken effect: confirm, don't assume. Every error is wrapped in an *Error whose
// Reason says what a person should look at.
type PowerFencer interface {
	// Name is the provider's name, for metrics and records ("ipmi").
	Name() string
	// PowerOff sends the power-off command.
	PowerOff(ctx context.Context, t Target) error
	// PowerState reads the power state back.
	PowerState(ctx context.Context, t Target) (PowerState, error)
	// PowerOn sends the power-on command (used by recovery and tests).
	PowerOn(ctx context.Context, t Target) error
}

// Reason classifies a provider error. Reasons are used as condition reasons on NodeFences.
type Reason string

const (
	// ReasonUnreachable: no answer from the BMC (network, address, BMC down). Retryable.
	ReasonUnreachable Reason = "BMCUnreachable"
	// ReasonAuthFailed: the BMC refused the credentials. Not retryable until the Secret changes.
	ReasonAuthFailed Reason = "BMCAuthFailed"
	// ReasonRefused: the BMC answered but refused or failed the command. Retryable.
	ReasonRefused Reason = "BMCRefused"
	// ReasonBadTarget: the node's BMC address or credentials are missing or malformed.
	ReasonBadTarget Reason = "BadTarget"
)

// Error is a provider error with a Reason.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// NewError wraps err with reason.
func NewError(reason Reason, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Reason: reason, Err: err}
}

// ReasonOf returns the Reason of a provider error, ReasonRefused for any other error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonRefused
}

// IsRetryable says whether trying again may help without a person changing something.
func IsRetryable(err error) bool {
	switch ReasonOf(err) {
	case ReasonAuthFailed, ReasonBadTarget:
		return false
	}
	return true
}

// TerminationState is what a node's agent reports of a termination it was ordered to run.
type TerminationState string

const (
	// TerminationPending: the order has not reached the agent yet.
	TerminationPending TerminationState = "Pending"
	// TerminationRunning: the agent is terminating the workload.
	TerminationRunning TerminationState = "Running"
	// TerminationConfirmed: the agent terminated the workload and its read-back of the
	// runtime shows no workload container running.
	TerminationConfirmed TerminationState = "Confirmed"
	// TerminationFailed: the agent could not terminate or confirm; the message says why.
	TerminationFailed TerminationState = "Failed"
)

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

// TerminateOrder is one order to terminate a node's workload.
type TerminateOrder struct {
	Node string
	// ID names the order; the agent runs an ID once.
	ID string
	// GracePeriodSeconds, when set, caps every pod's grace period.
	GracePeriodSeconds *int64
	// Via is the channel; empty means ViaDirect.
	Via Via
}

// WorkloadTerminator has a node's agent stop the kubelet and terminate every workload
// container as the kubelet would, and reads the outcome back.
//
// Contract: Terminate is idempotent for one order (the agent runs an ID once). Termination
// returns Confirmed only when the agent's report says so and a read-back of the runtime made
// after it shows no workload container running: a report alone is not a confirmation.
type WorkloadTerminator interface {
	// Name is the provider's name, for metrics and records ("agent").
	Name() string
	// Terminate sends the order.
	Terminate(ctx context.Context, o TerminateOrder) error
	// Termination reads the order's state back (on the order's channel), with a message for
	// people.
	Termination(ctx context.Context, o TerminateOrder) (TerminationState, string, error)
}
