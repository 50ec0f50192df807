package v1alpha1

// Confirmed says whether the record holds a confirmed fence: a ConfirmOff, ConfirmTerminated or
// ConfirmSelfFenced step that Succeeded. Every release step requires it (invariant 1).
func (nf *NodeFence) Confirmed() bool {
	for _, s := range nf.Status.Steps {
		if (s.Name == StepConfirmOff || s.Name == StepConfirmTerminated || s.Name == StepConfirmSelfFenced) && s.State == StepSucceeded {
			return true
		}
	}
	return false
}
