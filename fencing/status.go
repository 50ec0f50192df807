package fencing

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// recordStart appends a Started step for the action and moves the phase along.
func recordStart(nf *v1alpha1.NodeFence, a action, now time.Time) {
	st := &nf.Status
	step := v1alpha1.Step{Name: a.step, State: v1alpha1.StepStarted, StartTime: metav1.NewTime(now)}
	if isFenceStep(a.step) {
		m := nf.Spec.Methods[a.method]
		step.Method = m.Name
		st.Phase = v1alpha1.PhaseFencing
		if a.step == methodKinds[m.Type].fence {
			st.Method = m.Name
			st.MethodStartTime = &step.StartTime
			st.FencedTime, st.Liveness, st.ConfirmedLeaseRenewTime = nil, nil, nil
		}
		msg := "method " + m.Name + ": " + string(a.step)
		if names := levelNames(nf.Spec.Methods, a.method); len(names) > 1 {
			msg += "; level " + m.Level + " needs all of " + strings.Join(names, ", ") + " confirmed"
		}
		setCondition(nf, v1alpha1.ConditionFenced, metav1.ConditionFalse, v1alpha1.ReasonInProgress, msg)
	} else {
		st.Phase = v1alpha1.PhaseReleasing
	}
	st.Steps = append(st.Steps, step)
}

// lastStep is the step being taken.
func lastStep(nf *v1alpha1.NodeFence) *v1alpha1.Step {
	return &nf.Status.Steps[len(nf.Status.Steps)-1]
}

// recordEnd closes the last step.
func recordEnd(nf *v1alpha1.NodeFence, state v1alpha1.StepState, message string, now time.Time) {
	s := lastStep(nf)
	s.State, s.Message = state, message
	end := metav1.NewTime(now)
	s.EndTime = &end
	if k, ok := kindOfStep(s.Name); ok && k.confirm == s.Name && state == v1alpha1.StepSucceeded {
		if Confirmed(nf) {
			nf.Status.Phase = v1alpha1.PhaseFenced
			nf.Status.FencedTime = &end
			setCondition(nf, v1alpha1.ConditionFenced, metav1.ConditionTrue, k.confirmedReason, message)
		} else {
			// One method of a level: the node is not fenced until the level's others are.
			setCondition(nf, v1alpha1.ConditionFenced, metav1.ConditionFalse, v1alpha1.ReasonInProgress,
				"method "+s.Method+" confirmed; its level needs all of "+strings.Join(levelNames(nf.Spec.Methods, methodIndex(nf, s.Method)), ", ")+" confirmed")
		}
	}
	if disproved(*s) {
		nf.Status.Phase = v1alpha1.PhaseFencing
		nf.Status.FencedTime = nil
		setCondition(nf, v1alpha1.ConditionFenced, metav1.ConditionFalse, s.Reason, message)
	}
}

// recordFinish marks the fence Released.
func recordFinish(nf *v1alpha1.NodeFence, now time.Time) {
	t := metav1.NewTime(now)
	nf.Status.Phase = v1alpha1.PhaseReleased
	nf.Status.ReleasedTime = &t
	setCondition(nf, v1alpha1.ConditionReleased, metav1.ConditionTrue, v1alpha1.ReasonReleased,
		"out-of-service taint, pod deletion and attachment release done as the fence's policy asked")
}

// recordFailure marks the fence Failed with the reason of its last failed step.
func recordFailure(nf *v1alpha1.NodeFence, reason, message string) {
	nf.Status.Phase = v1alpha1.PhaseFailed
	setCondition(nf, v1alpha1.ConditionFenced, metav1.ConditionFalse, reason, message)
	setCondition(nf, v1alpha1.ConditionReleased, metav1.ConditionFalse, v1alpha1.ReasonNotFenced, releasedBeforeFailure(nf))
}

// maxConditionMessage is the most a condition's message holds (metav1.Condition's schema): a
// longer one gets the whole status write refused.
const maxConditionMessage = 32768

func setCondition(nf *v1alpha1.NodeFence, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&nf.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: shorten(message, maxConditionMessage), ObservedGeneration: nf.Generation,
	})
}

// releasedBeforeFailure says what a failed fence released: nothing, unless its node showed
// life between two release steps (liveness.go), after pods had been force-deleted or
// attachments released — then the operator must look at once: a replacement may run beside
// the original.
func releasedBeforeFailure(nf *v1alpha1.NodeFence) string {
	if !nf.Status.ReleasedAny() {
		if taken := nf.Status.ReleaseStepsTaken(); len(taken) > 0 {
			tainted := ""
			if since, ok := taintedSinceConfirmation(nf); ok {
				tainted = fmt.Sprintf(", and the node carried the out-of-service taint from %s (Kubernetes force-deletes and detaches while it is on)", since.UTC().Format(time.RFC3339))
			}
			return fmt.Sprintf("no pod force-deleted or attachment released is on record, but this fence took %s before the node showed life after its fence was confirmed%s; "+
				"a controller that stopped between a step's action and its record leaves no count: pods may have been force-deleted and volumes released, so a replacement may run beside the original; check node %s at once",
				stepNames(taken), tainted, nf.Spec.NodeName)
		}
		if since, tainted := taintedSinceConfirmation(nf); tainted {
			// The taint alone releases: Kubernetes force-deletes the node's pods (PodGC) and
			// detaches its volumes while it is on.
			return fmt.Sprintf("nothing was force-deleted or released by this fence, but the node carried the out-of-service taint from %s (one this fence added was taken back): "+
				"Kubernetes may have force-deleted its pods and detached their volumes meanwhile, so a replacement may run beside the original; check node %s at once",
				since.UTC().Format(time.RFC3339), nf.Spec.NodeName)
		}
		return "nothing was released"
	}
	return fmt.Sprintf("%s before the node showed life after its fence was confirmed "+
		"(an out-of-service taint this fence added was taken back; one on the node before it stays): a replacement may run beside the original; check node %s at once",
		releasedCounts(nf), nf.Spec.NodeName)
}

// stepNames is "DeletePods and ReleaseAttachments".
func stepNames(steps []v1alpha1.StepName) string {
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = string(s)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// releasedCounts is "2 pods force-deleted and 1 attachment released", and the attachments freed
// from a stuck attacher when there are any.
func releasedCounts(nf *v1alpha1.NodeFence) string {
	s := fmt.Sprintf("%s force-deleted and %s released", countOf(int(nf.Status.PodsDeleted), "pod"), countOf(int(nf.Status.AttachmentsReleased), "attachment"))
	if forced := nf.Status.AttachmentsForced; len(forced) > 0 {
		s += fmt.Sprintf(" (freed from a stuck CSI attacher, never unpublished: %s)", strings.Join(forced, ", "))
	}
	return s
}
