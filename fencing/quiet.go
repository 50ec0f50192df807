package fencing

import (
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// Quiet passes. VerifyFenced looks at the node's signals every second of its window, and a release
// step that waits (ReleaseAttachments for the attacher of a node left running, DetachVolumes for
// the cloud, DeletePods for a finalizer) looks again every second; a pass that saw nothing new
// leaves the record as it was but for the step's attempt count. Such a pass is not written (a
// release step's only once this controller has written the step: the first pass of one resumed
// from another's record is): the record already says what is watched and until when, and a status
// write a second per fence (40 a second for a rack) only loads a busy API server and, with the
// cache behind it, conflicts with the write before it ("the object has been modified"), which
// sends the fence into the work queue's back-off. The passes are counted here and added to the
// step's attempts at the fence's next write, so the record counts every pass this controller took
// (a new leader undercounts by the passes its predecessor did not write). Every other change — the
// baseline, a window made longer, a sign of life, a new message, a pod deleted or an attachment
// released, the step's end — is written as before, before anything is released. A waiting release
// step still says StepRetrying every tenth pass. The count is kept in the reconciler's fenceMemory
// (memory.go).

// onlyCounted says whether after differs from before by nothing but the last step's attempts.
func onlyCounted(before, after *v1alpha1.NodeFenceStatus) bool {
	n := len(after.Steps)
	if n == 0 || n != len(before.Steps) {
		return false
	}
	a := *after
	a.Steps = append([]v1alpha1.Step(nil), after.Steps...)
	a.Steps[n-1].Attempts = before.Steps[n-1].Attempts
	return apiequality.Semantic.DeepEqual(before, &a)
}
