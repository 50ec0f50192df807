package fencing

// Event reasons, on NodeFences, Nodes and FencingPolicies.
const (
	ReasonFenceCreated        = "FenceCreated"
	ReasonFenceRequested      = "FenceRequested"
	ReasonInvalidFenceRequest = "InvalidFenceRequest"
	ReasonNoPolicy            = "NoFencingPolicy"
	ReasonStormGuard          = "StormGuardActive"
	ReasonAliveNotFencing     = "NodeAliveNotFencing"
	ReasonNoMethod            = "NoUsableMethod"
	ReasonDryRun              = "DryRun"
	ReasonStepRetrying        = "StepRetrying"
	ReasonStepSucceeded       = "StepSucceeded"
	ReasonMethodFailed        = "MethodFailed"
	ReasonFenceConfirmed      = "FenceConfirmed"
	ReasonFenceFailed         = "FenceFailed"
	ReasonReleased            = "Released"
	ReasonNotConfirmed        = "FenceNotConfirmed"

	// ReasonPowerStillOn: the BMC accepted the off command but still reports power On.
	ReasonPowerStillOn = "PowerStillOn"
	// ReasonMethodTimedOut: the method did not confirm within its timeout.
	ReasonMethodTimedOut = "MethodTimedOut"
	// ReasonNoProvider: no provider is registered for the method's type.
	ReasonNoProvider = "NoProvider"
	// ReasonDisruption is the pod DisruptionTarget condition's reason when Palisade
	// force-deletes a pod (KEP-3329; PodGC uses DeletionByPodGC).
	ReasonDisruption = "DeletionByPalisade"
)
