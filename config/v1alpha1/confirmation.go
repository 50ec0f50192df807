package v1alpha1

import "slices"

// Disproving says whether a failed step's reason says that a confirmed fence did not hold: the
// node showed life after it, or (for a method that leaves the node running) its workload runs
// again or can no longer be read back. Such a step ends the confirmation it disproved.
func Disproving(reason string) bool {
	return reason == ReasonNodeAliveAfterFence || reason == ReasonWorkloadRunningAfterFence ||
		reason == ReasonWorkloadUnverified
}

// PowerOffMethod is the method that confirmed the node's machine off (its ConfirmOff step
// Succeeded) since the last step that disproved a confirmation, "" when none did: the machine
// can then only come back with a new boot ID. Read from the steps, not from status.method: a
// level may hold several methods (a power-off and a storage fence), and status.method names
// the last one taken, which need not be the one that cut the power. When two methods
// confirmed it off, the later one.
func (s *NodeFenceStatus) PowerOffMethod() string {
	method := ""
	for _, st := range s.Steps {
		switch {
		case st.Name == StepConfirmOff && st.State == StepSucceeded:
			method = st.Method
		case st.State == StepFailed && Disproving(st.Reason):
			method = ""
		}
	}
	return method
}

// ReleasedAny says whether the fence released anything: force-deleted pods, deleted
// VolumeAttachments, or freed them from a stuck CSI attacher (AttachmentsForced). The
// controller's condition and the CLI's verdict on a failed fence both read it.
func (s *NodeFenceStatus) ReleasedAny() bool {
	return s.PodsDeleted > 0 || s.AttachmentsReleased > 0 || len(s.AttachmentsForced) > 0
}

// ReleaseStepsTaken names the fence's steps that force-delete pods or release attachments
// (DeletePods, ReleaseAttachments, DetachVolumes) and may have acted, whatever the counters
// say (ReleasedAny): a controller that stopped between a step's action and its record of it
// (killed, or its write refused) leaves no count, and the pass resumed after it finds nothing
// left to count. A step stopped by a sign of life at its first attempt did nothing: it looks
// before it acts. Each is named once, in the order first taken.
func (s *NodeFenceStatus) ReleaseStepsTaken() []StepName {
	var taken []StepName
	for _, st := range s.Steps {
		switch {
		case st.Name != StepDeletePods && st.Name != StepReleaseAttachments && st.Name != StepDetachVolumes:
		case !st.MayHaveActed():
		case !slices.Contains(taken, st.Name):
			taken = append(taken, st.Name)
		}
	}
	return taken
}

// MayHaveActed says whether a release step may have acted: all but one stopped by a sign of
// life at its first attempt, which did nothing (a step looks before it acts, and one resumed by
// a controller that did not begin it counts an attempt more).
func (st Step) MayHaveActed() bool {
	return !(st.State == StepFailed && Disproving(st.Reason) && st.Attempts <= 1)
}
