package fencing

import (
	"slices"
	"time"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// DefaultMethodTimeout bounds a method without its own timeout.
const DefaultMethodTimeout = 60 * time.Second

// actionKind is what the planner asks the reconciler to do next.
type actionKind int

const (
	// actStart records a new step as Started, then takes it.
	actStart actionKind = iota
	// actResume takes the last step again: it was recorded but not finished (a restart, or a
	// step that is still in progress).
	actResume
	// actFail ends the fence as Failed: every method failed, nothing more is released.
	actFail
	// actFinish ends the fence as Released.
	actFinish
	// actNone: the fence is over.
	actNone
)

// action is the planner's answer: a kind, and for actStart the step to record.
type action struct {
	kind   actionKind
	step   v1alpha1.StepName
	method int // index into spec.methods of the current method
}

// plan decides the next action from the record alone. It is pure: same record, same answer.
func plan(nf *v1alpha1.NodeFence) action {
	switch nf.Status.Phase {
	case v1alpha1.PhaseReleased, v1alpha1.PhaseFailed:
		return action{kind: actNone}
	}
	steps := nf.Status.Steps
	if len(steps) == 0 {
		return action{kind: actStart, step: methodKinds[nf.Spec.Methods[0].Type].fence, method: 0}
	}
	last := steps[len(steps)-1]
	method := methodIndex(nf, last.Method)
	switch last.State {
	case v1alpha1.StepStarted:
		return action{kind: actResume, step: last.Name, method: method}
	case v1alpha1.StepFailed:
		// A method fails at one of its own steps, or at a release step when the node showed
		// life after its confirmation: either way the chain escalates.
		// The rest of the method's level is skipped: the level cannot be all confirmed.
		if _, end := levelSpan(nf.Spec.Methods, method); (isFenceStep(last.Name) || disproved(last)) && end+1 < len(nf.Spec.Methods) {
			return action{kind: actStart, step: methodKinds[nf.Spec.Methods[end+1].Type].fence, method: end + 1}
		}
		return action{kind: actFail}
	}
	// A confirmed method whose level has more methods: the level's next one.
	if _, end := levelSpan(nf.Spec.Methods, method); isConfirmStep(last.Name) && method < end {
		return action{kind: actStart, step: methodKinds[nf.Spec.Methods[method+1].Type].fence, method: method + 1}
	}
	next, ok := nextStep(nf, last.Name)
	if !ok {
		return action{kind: actFinish}
	}
	return action{kind: actStart, step: next, method: method}
}

// disproved says whether a failed step is a confirmed fence disproved by the node's signs of
// life (or, for a method that leaves the node running, by its workload running again).
func disproved(s v1alpha1.Step) bool {
	return s.State == v1alpha1.StepFailed && disproving(s.Reason)
}

// disproving says whether a step reason says a confirmed fence did not hold (the API's rule,
// which the CLI reads too).
func disproving(reason string) bool { return v1alpha1.Disproving(reason) }

// releaseSequence is the order of the release steps after a confirmed fence. VerifyFenced is
// always taken: it watches the node's own signals before anything is released.
var releaseSequence = []v1alpha1.StepName{
	v1alpha1.StepVerifyFenced,
	v1alpha1.StepTaint,
	v1alpha1.StepDeletePods,
	v1alpha1.StepDetachVolumes,
	v1alpha1.StepReleaseAttachments,
}

// nextStep is the enabled step after done, false when none is left: a method's command is
// followed by its confirmation, a confirmation by the release steps in order.
func nextStep(nf *v1alpha1.NodeFence, done v1alpha1.StepName) (v1alpha1.StepName, bool) {
	if k, ok := kindOfStep(done); ok && k.fence == done {
		return k.confirm, true
	}
	rest := releaseSequence
	if i := slices.Index(releaseSequence, done); i >= 0 {
		rest = releaseSequence[i+1:]
	}
	for _, s := range rest {
		if stepEnabled(nf, s) {
			return s, true
		}
	}
	return "", false
}

func stepEnabled(nf *v1alpha1.NodeFence, s v1alpha1.StepName) bool {
	r := nf.Spec.Release
	switch s {
	case v1alpha1.StepDetachVolumes:
		_, ok := volumeMethod(nf)
		return ok
	case v1alpha1.StepTaint:
		return enabled(r.OutOfServiceTaint)
	case v1alpha1.StepDeletePods:
		return enabled(r.DeletePods)
	case v1alpha1.StepReleaseAttachments:
		return enabled(r.ReleaseAttachments)
	}
	return true
}

func enabled(b *bool) bool { return b == nil || *b }

func isFenceStep(s v1alpha1.StepName) bool {
	return !slices.Contains(releaseSequence, s)
}

func methodIndex(nf *v1alpha1.NodeFence, name string) int {
	for i, m := range nf.Spec.Methods {
		if m.Name == name {
			return i
		}
	}
	return 0
}

// methodTimeout is the method's timeout or the default.
func methodTimeout(m v1alpha1.Method) time.Duration {
	if m.Timeout != nil && m.Timeout.Duration > 0 {
		return m.Timeout.Duration
	}
	return DefaultMethodTimeout
}
