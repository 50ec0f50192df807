package providers

import (
	"context"
	"time"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// Fencer is one fencing method: power-off through a BMC or a cloud, a storage fence, the node
// agent's executor, a self-fence. It resolves its own target from the Node, the method's
// settings and its Secret; the caller never reads addresses or credentials.
//
// Contract:
//   - Fence starts the fence and is idempotent: calling it again for the same Request (the same
//     NodeFence UID) does no harm and may re-send the command. A nil error means only that the
//     command was accepted, never that the node is fenced.
//   - Check reads the fence back; only a Status with State Confirmed confirms it (invariant 1:
//     confirmation only by read-back). Unknown means the provider could not tell: the fence may
//     be in progress, so the caller asks again. Once Request.Expired is set, the provider answers
//     Failed rather than InProgress when it has something better to say than a timeout.
//   - End says the method is over for this fence (it failed, escalated, or the fence ended):
//     the provider drops whatever it still has pending for the Request, such as an order
//     waiting for a node's agent. It is idempotent and may be called for a fence never started.
//   - Every error is a retry unless IsRetryable says otherwise: a timeout or an unreachable
//     endpoint means the command may or may not have taken effect (confirm, don't assume).
//     Errors carry a Reason (ReasonOf) and may carry a hint for people (HintOf).
type Fencer interface {
	// Name is the provider's name, for metrics and records ("ipmi").
	Name() string
	// Fence starts the fence; the Status's Message says what was done, for the record.
	Fence(ctx context.Context, req Request) (Status, error)
	// Check reads back whether the fence holds.
	Check(ctx context.Context, req Request) (Status, error)
	// End drops what the provider still has pending for the Request.
	End(ctx context.Context, req Request) error
}

// VolumeReleaser is a Fencer that can also release the node's volumes at its cloud once its
// fence is confirmed (AWS: force-detach the stopped instance's EBS volumes). The caller takes
// it only as a release step, after the confirmation and the liveness check.
type VolumeReleaser interface {
	// ReleaseVolumes detaches the volumes (idempotent: it may be called again while they
	// detach) and reads them back: Confirmed once none is attached.
	ReleaseVolumes(ctx context.Context, req Request) (Status, error)
}

// Unfencer is a Fencer whose fence outlives the fence's work: a storage fence stays up after
// the node is released, until the fence record is deleted once the node is repaired. The
// caller lifts it then, and only then.
type Unfencer interface {
	// Unfence lifts the fence the Request's method put up (idempotent: it is called again
	// while the fence is being lifted) and reads it back: Confirmed once nothing of it is
	// left, also when it was never put up.
	Unfence(ctx context.Context, req Request) (Status, error)
}

// PowerRestorer is a Fencer that can turn the machine it powered off back on. The caller asks
// for it only after the fence was released (the policy's recovery.powerOn): the machine
// reboots, and its node is unfenced once it is back with a new boot ID.
type PowerRestorer interface {
	// RestorePower sends the power-on command (idempotent: a machine already on stays on).
	RestorePower(ctx context.Context, req Request) error
}

// Request is one fence of one node through one method.
type Request struct {
	// Fence is the record, read-only: its UID names the fence (and any order sent for it),
	// Spec.Verdict says how the node failed, Status.Steps holds the steps' start times.
	Fence *v1alpha1.NodeFence
	// Method is the method being taken, with its settings.
	Method v1alpha1.Method
	// Attempt counts how often the current step was taken, 1 the first time.
	Attempt int32
	// Now is the caller's clock.
	Now time.Time
	// Expired says the method's timeout has passed.
	Expired bool
	// LiftToken is a fencing token drawn for lifting the fence (Unfence only), newer than the
	// fence's own (Fence.Status.Token): whoever carries the lift out then refuses a late copy
	// of the fence's commands. 0 when no token could be drawn.
	LiftToken int64
	// Volumes are the volumes of the node's attachments being released (ReleaseVolumes only):
	// those the release lets go, not those kept for a pod that stays on the node. A volume
	// release acts on these and no other.
	Volumes []Volume
}

// Volume is a volume of one of the node's VolumeAttachments: the attachment's name, and the
// volume's CSI driver and volume handle (an in-tree volume's as its migration to CSI translates
// them: an awsElasticBlockStore's are ebs.csi.aws.com and its bare vol-… ID; both "" when
// unknown).
type Volume struct {
	Attachment, Driver, Handle string
}

// Node is the name of the node being fenced.
func (r Request) Node() string { return r.Fence.Spec.NodeName }

// TargetNamer is a Fencer whose fence acts on one machine that it can name before acting (a
// power method: the BMC, instance or VM behind the node). The caller records the name on the
// fence step before the step is taken (invariant 2), and the method's every later call —
// the fence command again, the read-back, a volume release, a power-on — acts on that machine
// or refuses with ReasonTargetChanged: a node's settings edited meanwhile never make another
// machine's power state confirm the fence.
type TargetNamer interface {
	// FenceTarget names the machine the Request's method would act on now, without
	// credentials, in at most MaxTargetLength bytes; "" when the provider has no one machine.
	FenceTarget(ctx context.Context, req Request) (string, error)
}

// MaxTargetLength bounds a recorded target (the NodeFence CRD's limit on Step.Target).
const MaxTargetLength = 1024

// FencedTarget is the machine the method acts on, as its TargetNamer named it and the caller
// recorded it on the method's fence step (Step.Target); "" when none was recorded (a fence
// begun by an earlier version, or a method that names none).
func (r Request) FencedTarget() string {
	steps := r.Fence.Status.Steps
	for i := len(steps) - 1; i >= 0; i-- {
		if s := steps[i]; s.Method == r.Method.Name && s.Target != "" {
			return s.Target
		}
	}
	return ""
}

// ID names the fence (its UID). The Executor's orders name the method too (agent.OrderID), so
// that each method of a chain is carried out once.
func (r Request) ID() string { return string(r.Fence.UID) }

// State is what a provider reads back of a fence.
type State string

const (
	// Confirmed: the read-back shows the node fenced.
	Confirmed State = "Confirmed"
	// InProgress: the fence is under way and not confirmed yet.
	InProgress State = "InProgress"
	// Unknown: the provider could not tell; the fence may be in progress.
	Unknown State = "Unknown"
	// Failed: the fence cannot be confirmed through this method; the caller escalates.
	Failed State = "Failed"
	// Gone: the read-back shows the machine no longer exists (a terminated cloud instance, a
	// deleted VM): nothing is left that could run the node's workload, so it counts as a
	// confirmed fence. A provider says Gone only from its own authoritative read-back, never
	// from a failure to reach the machine.
	Gone State = "Gone"
)

// Status is a provider's answer.
type Status struct {
	State State
	// Reason is a CamelCase word for records and conditions ("" when Confirmed).
	Reason Reason
	// Message says what the provider did or saw, for people.
	Message string
	// RetryAfter, when set, is when to ask again (InProgress, Unknown).
	RetryAfter time.Duration
	// BootID, on a Confirmed answer, is the boot ID of the machine the read-back saw the fence
	// in, when the provider has one from the machine itself (the agent's executor answer); ""
	// otherwise. The controller records it with the confirmation.
	BootID string
}
