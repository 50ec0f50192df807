package providers

import (
	"errors"
	"fmt"
)

// Reason is a CamelCase word for a provider's answer or error. Reasons end up as step and
// condition reasons on NodeFences.
type Reason string

// Provider reasons, for errors and statuses.
const (
	// ReasonUnreachable: no answer from the BMC (network, address, BMC down). Retryable.
	ReasonUnreachable Reason = "BMCUnreachable"
	// ReasonAuthFailed: the BMC refused the credentials. Not retryable until the Secret changes.
	ReasonAuthFailed Reason = "BMCAuthFailed"
	// ReasonUntrustedCertificate: the BMC's TLS certificate is not signed by a trusted CA or
	// does not name the address. Not retryable until the CA bundle or the certificate changes.
	ReasonUntrustedCertificate Reason = "BMCCertificateUntrusted"
	// ReasonRefused: the BMC answered but refused or failed the command. Retryable.
	ReasonRefused Reason = "BMCRefused"
	// ReasonBadTarget: the node's BMC address or credentials, or the method's settings, are
	// missing or malformed. Not retryable.
	ReasonBadTarget Reason = "BadTarget"
	// ReasonAPIError: reading or writing through the API server failed. Retryable.
	ReasonAPIError Reason = "APIError"
	// ReasonPowerStillOn: the BMC accepted the off command but still reports power On.
	ReasonPowerStillOn Reason = "PowerStillOn"
	// ReasonPowerStateUnknown: the BMC's power status says neither on nor off (IPMI: no off
	// command is sent to it then).
	ReasonPowerStateUnknown Reason = "PowerStateUnknown"
	// ReasonOrderPending: the node's agent has not taken the order yet.
	ReasonOrderPending Reason = "Pending"
	// ReasonOrderRunning: the node's agent is carrying out the order.
	ReasonOrderRunning Reason = "Running"
	// ReasonExecutorFailed: the node's agent could not terminate or confirm the workload.
	ReasonExecutorFailed Reason = "ExecutorFailed"
	// ReasonStaleToken: the node's agent refused the order because it already took a later
	// fence's fencing token (a late or replayed order).
	ReasonStaleToken Reason = "StaleFencingToken"
	// ReasonTokenNotRecorded: the node's agent refused the order because it could not read or
	// record the highest fencing token it took (its --state-dir).
	ReasonTokenNotRecorded Reason = "FencingTokenNotRecorded"
	// ReasonWaitingForSafeTime: a self-fence's safe time has not passed yet.
	ReasonWaitingForSafeTime Reason = "WaitingForSafeTime"
	// ReasonNodeReachable: a node expected to have fenced itself sent a signal again.
	ReasonNodeReachable Reason = "NodeReachableAgain"
	// ReasonOtherAgentsSilent: a self-fence cannot be relied on while another node's agent is
	// silent too: the two may reach each other (an island cut off together), and an agent that
	// reaches a peer does not count itself isolated, so it does not fence itself.
	ReasonOtherAgentsSilent Reason = "OtherAgentsSilent"
	// ReasonSelfFenceNotArmed: the SelfFence method cannot rely on the node's agent fencing
	// itself: never heard, self-fencing off, or slower than the method's safeAfter allows.
	ReasonSelfFenceNotArmed Reason = "SelfFenceNotArmed"
	// ReasonAgentSilentBeforeNode: the SelfFence method cannot rely on the node's agent: it fell
	// silent before the node did (the node renewed its Lease or reached a peer after), so it had
	// stopped before the node was cut off, and a stopped agent fences nothing.
	ReasonAgentSilentBeforeNode Reason = "AgentSilentBeforeNode"
	// ReasonCloudAuthFailed: the cloud refused the credentials or the permission (AuthFailure,
	// UnauthorizedOperation). Not retryable until the credentials or the role change.
	ReasonCloudAuthFailed Reason = "CloudAuthFailed"
	// ReasonCloudUnreachable: no answer from the cloud's API in time. Retryable: the command
	// may or may not have taken effect.
	ReasonCloudUnreachable Reason = "CloudUnreachable"
	// ReasonCloudRefused: the cloud answered with an error. Retryable.
	ReasonCloudRefused Reason = "CloudRefused"
	// ReasonStorageRefused: the storage (its CSI driver, through csi-addons) answered the fence
	// or its lifting with an error; the csi-addons manager tries again.
	ReasonStorageRefused Reason = "StorageFenceRefused"
	// ReasonStorageFenceRemoved: the storage fence's object was deleted or changed by someone
	// else: the storage may no longer refuse the node.
	ReasonStorageFenceRemoved Reason = "StorageFenceRemoved"
	// ReasonGatewayUnreachable: no answer from a storage gateway in time. Retryable: the
	// command may or may not have taken effect.
	ReasonGatewayUnreachable Reason = "StorageGatewayUnreachable"
	// ReasonTargetChanged: the node's fence target (its BMC address, system, instance or VM)
	// names another machine than the one recorded on the method's fence step before its
	// command: a read-back of it cannot confirm the fence, and no command may go to it. Not
	// retried.
	ReasonTargetChanged Reason = "FenceTargetChanged"
	// ReasonTimedOut: the method did not confirm within its timeout.
	ReasonTimedOut Reason = "MethodTimedOut"
)

// Error is a provider error with a Reason and, when the provider knows one, a hint telling a
// person what to look at.
type Error struct {
	Reason Reason
	Hint   string
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// NewError wraps err with reason; nil stays nil.
func NewError(reason Reason, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Reason: reason, Err: err}
}

// WithHint sets the hint of a provider error (wrapping any other error as ReasonRefused).
func WithHint(err error, hint string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		c := *e
		c.Hint = hint
		return &c
	}
	return &Error{Reason: ReasonRefused, Hint: hint, Err: err}
}

// ReasonOf returns the Reason of a provider error, ReasonRefused for any other error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonRefused
}

// HintOf returns the hint of a provider error, "" when it has none.
func HintOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Hint
	}
	return ""
}

// IsRetryable says whether trying again may help without a person changing something.
func IsRetryable(err error) bool {
	switch ReasonOf(err) {
	case ReasonAuthFailed, ReasonBadTarget, ReasonUntrustedCertificate, ReasonCloudAuthFailed, ReasonTargetChanged:
		return false
	}
	return true
}

// IgnoreRetryable returns nil for an error that trying again may cure, err otherwise.
func IgnoreRetryable(err error) error {
	if IsRetryable(err) {
		return nil
	}
	return err
}
