package fencing

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// Event reasons, on NodeFences, Nodes and FencingPolicies.
const (
	ReasonFenceCreated        = "FenceCreated"
	ReasonFenceRequested      = "FenceRequested"
	ReasonInvalidFenceRequest = "InvalidFenceRequest"
	ReasonNoPolicy            = "NoFencingPolicy"
	ReasonStormGuard          = "StormGuardActive"
	ReasonControllerBlind     = "ControllerBlind"
	// ReasonAgentsSilent: a node found Dead is not fenced while most agents the controller
	// judges by are silent too, or cannot be judged yet (its heartbeat channel is the likelier
	// cut).
	ReasonAgentsSilent        = "AgentsSilent"
	ReasonControllerSeeing    = "ControllerSeeing"
	ReasonAliveNotFencing     = "NodeAliveNotFencing"
	ReasonNoMethod            = "NoUsableMethod"
	ReasonDryRun              = "DryRun"
	ReasonStepRetrying        = "StepRetrying"
	ReasonStepSucceeded       = "StepSucceeded"
	ReasonMethodFailed        = "MethodFailed"
	ReasonFenceConfirmed      = "FenceConfirmed"
	ReasonFenceFailed         = "FenceFailed"
	ReasonReleased            = "Released"
	ReasonNodeAliveAfterFence = v1alpha1.ReasonNodeAliveAfterFence
	// ReasonWorkloadRunningAfterFence: the workload ran again after the Executor's confirmation.
	ReasonWorkloadRunningAfterFence = v1alpha1.ReasonWorkloadRunningAfterFence
	// ReasonWorkloadUnverified: no read-back of the workload came after the Executor's window.
	ReasonWorkloadUnverified = v1alpha1.ReasonWorkloadUnverified
	ReasonNodeDeleted        = "NodeDeleted"
	ReasonDeletionHeld       = "NodeDeletionHeld"
	ReasonDeletionReleased   = "NodeDeletionReleased"
	// ReasonStaleUnfenceRequest: a node carried an unfence request from before its fence began;
	// it was removed before the fence's first step.
	ReasonStaleUnfenceRequest = "StaleUnfenceRequest"
	// ReasonFenceRequestAnswered: a node carried a fence request made while its fence was under
	// way, not the one that asked for it; the fence answered it, and it was removed at the first
	// look after the release. Or the fence failed: the request it was made for, or one made
	// while it ran, was removed before the failure was recorded.
	ReasonFenceRequestAnswered = "FenceRequestAnswered"
	// ReasonFenceRequestWaiting: a fence request was made while a fence of the node stands; the
	// event says what becomes of it (answered by that fence, kept while the node is held, or
	// waiting for a failed or leaving NodeFence to go). Said once per request.
	ReasonFenceRequestWaiting = "FenceRequestWaiting"
	// ReasonUnfenceRequestIgnored: an unfence request on a node whose fence is not released and
	// holding it (none, under way, failed, a dry run, being deleted) changes nothing; said once
	// per request (ReasonInvalidUnfenceRequest when it is malformed).
	ReasonUnfenceRequestIgnored = "UnfenceRequestIgnored"
	// ReasonFenceRequestKept: a node given back carried a fence request made while it was held;
	// it was kept, so the node is fenced again.
	ReasonFenceRequestKept = "FenceRequestKept"
	// ReasonFenceRequestDryRun: a fence request under a dry-run policy was recorded as a dry
	// run and removed from the Node (a request is acted on once; ReasonNoPolicy says the same
	// of one no policy covers).
	ReasonFenceRequestDryRun = "FenceRequestDryRun"
)

// Step reasons the controller itself gives (a step's reason may also be a provider's: see
// providers.Reason). The reason of a fence's last failed step becomes its Fenced condition's.
const (
	// ReasonAPIError: reading or writing through the API server failed; the step is retried.
	ReasonAPIError = string(providers.ReasonAPIError)
	// ReasonPodsRemaining: pods bound to the node are not yet marked Failed and deleted with
	// grace period 0 (a pod kept only by finalizers no longer counts).
	ReasonPodsRemaining = "PodsRemaining"
	// ReasonAttachmentsRemaining: VolumeAttachments of the node have not gone yet.
	ReasonAttachmentsRemaining = "AttachmentsRemaining"
	// ReasonAttachmentsForced: Palisade removed a stuck CSI attacher's finalizer from
	// VolumeAttachments of the node; their volumes may still be published to it in the storage
	// system.
	ReasonAttachmentsForced = "AttachmentsForced"
	// ReasonAwaitingConfirmation: a provider reads the fence as not confirmed yet without
	// giving a reason.
	ReasonAwaitingConfirmation = "AwaitingConfirmation"
	// ReasonMethodTimedOut: the method did not confirm within its timeout.
	ReasonMethodTimedOut = string(providers.ReasonTimedOut)
	// ReasonNotConfirmed: a release step found no confirmed fence in the record (invariant 1).
	ReasonNotConfirmed = "FenceNotConfirmed"
	// ReasonNoProvider: no provider is registered for the method's type.
	ReasonNoProvider = "NoProvider"
	// ReasonUnknownStep: the record names a step this controller does not know.
	ReasonUnknownStep = "UnknownStep"
	// ReasonTokenUnavailable (event, Fenced=False): no fencing token could be drawn; no step
	// is taken without one.
	ReasonTokenUnavailable = "FencingTokenUnavailable"
	// ReasonWatchingForLife: VerifyFenced is watching the node's signals before releasing.
	ReasonWatchingForLife = "WatchingForLife"
	// ReasonLifeSeen (step): the node showed life after the confirmation and the out-of-service
	// taint could not be removed yet; nothing more is released, and the step fails with
	// NodeAliveAfterFence once the taint is gone, whichever controller takes it up.
	ReasonLifeSeen = "LifeSeen"
	// ReasonWorkloadSeenRunning (step): ReasonLifeSeen for a workload read back running again
	// (WorkloadRunningAfterFence once the taint is gone).
	ReasonWorkloadSeenRunning = "WorkloadSeenRunning"
	// ReasonDisruption is the pod DisruptionTarget condition's reason when Palisade
	// force-deletes a pod (KEP-3329; PodGC uses DeletionByPodGC).
	ReasonDisruption = "DeletionByPalisade"
)

// noteLimit is the most an Event's note may hold (events.k8s.io/v1): the API server refuses a
// longer one, and the Event is lost.
const noteLimit = 1024

// BoundedNotes wraps rec so that every Event's note is cut to what the API server accepts (1024
// bytes, on a UTF-8 boundary, ending in "…"): a note built from outside text (a fence request's
// reason of 256 non-ASCII characters, a provider's error) would otherwise be refused whole,
// and the Event that tells of a request answered, a step retried or a fence failed lost.
func BoundedNotes(rec events.EventRecorder) events.EventRecorder {
	return boundedNotes{rec}
}

type boundedNotes struct{ rec events.EventRecorder }

func (b boundedNotes) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	msg := fmt.Sprintf(note, args...) // as the recorder itself formats it
	b.rec.Eventf(regarding, related, eventtype, reason, action, "%s", shorten(msg, noteLimit))
}

// shorten cuts s to at most n bytes (n > 3), on a UTF-8 boundary, ending in "…" when cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return truncate(s, n-len("…")) + "…"
}
