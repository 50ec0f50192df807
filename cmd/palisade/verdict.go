package main

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
)

// verdict is explain's last line: whether the node is being fenced, and why (not).
func verdict(e *explanation) string {
	if nf := e.fence; nf != nil && nf.Status.Phase != v1alpha1.PhaseRecovered {
		return fenceVerdict(e.name, nf, e.now)
	}
	switch {
	case e.node == nil:
		return fmt.Sprintf("%s does not exist: its last fence ended Recovered", e.name)
	case e.chosen < 0:
		return fmt.Sprintf("%s is not covered: no FencingPolicy selects it, so Palisade never fences it", e.name)
	}
	if v, ok := e.node.Annotations[v1alpha1.AnnotationFenceRequest]; ok {
		if _, err := requestText(v, "annotation "+v1alpha1.AnnotationFenceRequest, "why the node is to be fenced"); err != nil {
			return fmt.Sprintf("%s is not being fenced: its fence request is invalid and ignored: %v", e.name, err)
		}
		return fmt.Sprintf("%s has a fence request waiting for the controller: %q (no NodeFence yet: is the controller running?)", e.name, v)
	}
	p := e.policy()
	if v := listedVerdict(p, e.name); v != nil {
		return detectedVerdict(e.name, p, v, e.pods)
	}
	if obs, _ := leaseObservation(e); obs.Verdict == detectors.Dead {
		return fmt.Sprintf("%s is not being fenced: its Lease is expired on the API's view (%s), but policy %s does not list it unhealthy: "+
			"its agent or peers show it alive, or the controller is not running", e.name, obs.Reason, p.Name)
	}
	return fmt.Sprintf("%s is healthy: not fenced", e.name)
}

// fenceVerdict is the verdict of a node with a fence that is not over.
func fenceVerdict(name string, nf *v1alpha1.NodeFence, now time.Time) string {
	switch nf.Status.Phase {
	case v1alpha1.PhaseReleased:
		if r := nf.Status.Recovery; r != nil {
			return fmt.Sprintf("%s is being unfenced: %s: %s", name, r.How, r.Reason)
		}
		if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); c != nil && c.Status == metav1.ConditionFalse {
			return fmt.Sprintf("%s is fenced and held: %s: %s", name, c.Reason, c.Message)
		}
		released := "its fence released"
		if nf.Status.ReleasedTime != nil {
			released += " " + ago(now, nf.Status.ReleasedTime.Time)
		}
		return fmt.Sprintf("%s is fenced: %s; Palisade unfences it once it is back and clean", name, released)
	case v1alpha1.PhaseFailed:
		why := "every method failed"
		if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionFenced); c != nil {
			why = c.Reason + ": " + c.Message
		}
		if nf.Status.ReleasedAny() {
			forced := ""
			if f := nf.Status.AttachmentsForced; len(f) > 0 {
				forced = fmt.Sprintf(" (and freed from a stuck CSI attacher, never unpublished: %s)", strings.Join(f, ", "))
			}
			return fmt.Sprintf("%s is not fenced: its fence failed (%s) after it had force-deleted %d pods and released %d attachments%s "+
				"(the node showed life between release steps): look at the node at once, a replacement may run beside the original",
				name, why, nf.Status.PodsDeleted, nf.Status.AttachmentsReleased, forced)
		}
		if taken := nf.Status.ReleaseStepsTaken(); len(taken) > 0 {
			steps := make([]string, len(taken))
			for i, st := range taken {
				steps[i] = string(st)
			}
			return fmt.Sprintf("%s is not fenced: its fence failed (%s) after it took %s, which may have force-deleted pods and released attachments although none is on record "+
				"(the node showed life between release steps; a controller that stopped between a step's action and its record leaves no count): look at the node at once, a replacement may run beside the original",
				name, why, strings.Join(steps, ", "))
		}
		return fmt.Sprintf("%s is not fenced: its fence failed (%s) and released nothing; delete the NodeFence to try again once the cause is fixed", name, why)
	}
	if nf.Spec.DryRun {
		return fmt.Sprintf("%s is not being fenced: policy %s was a dry run when the fence (%s: %s) was recorded, and no step is taken; "+
			"once the policy fences for real, a new fence replaces this record when the node is found failed",
			name, nf.Spec.PolicyName, nf.Spec.Trigger, nf.Spec.Reason)
	}
	return fmt.Sprintf("%s is being fenced: %s, method %s, last step %s", name, orDash(string(nf.Status.Phase)), orDash(nf.Status.Method), lastStepText(*nf))
}

// detectedVerdict is the verdict of a node the detectors list unhealthy and that has no fence:
// what holds the controller back (fencing/node_controller.go, detect), in the controller's order.
// pods is what explain read of its pods under the policy's workloads (nil: none).
func detectedVerdict(name string, p *v1alpha1.FencingPolicy, v *v1alpha1.NodeVerdict, pods *nodePods) string {
	seen := fmt.Sprintf("%s: %s", v.Verdict, v.Reason)
	failed := detectors.Verdict(v.Verdict).Failed()
	chain := levelOrder(p.Spec.Methods)
	switch {
	case !failed:
		return fmt.Sprintf("%s is late (%s): not fenced yet; it is fenced if no signal comes before the policy's thresholds", name, seen)
	case conditionTrue(p.Status.Conditions, v1alpha1.ConditionControllerBlind) != nil:
		c := conditionTrue(p.Status.Conditions, v1alpha1.ConditionControllerBlind)
		return fmt.Sprintf("%s looks failed (%s) but is not fenced: the controller is blind (%s: %s)", name, seen, c.Reason, c.Message)
	case v.Verdict != string(detectors.Dead) && (len(chain) == 0 || !needsAgent(chain[0].Type)):
		return fmt.Sprintf("%s looks failed (%s) but is alive on other signals: it is not powered off blindly, since policy %s's chain does not start with the Executor; Palisade waits",
			name, seen, p.Name)
	case v.Verdict == string(detectors.Dead) && len(withoutAgent(chain)) == 0:
		return fmt.Sprintf("%s looks failed (%s) but cannot be fenced: policy %s has no method that works without the node's agent", name, seen, p.Name)
	case conditionTrue(p.Status.Conditions, v1alpha1.ConditionStormGuardActive) != nil:
		c := conditionTrue(p.Status.Conditions, v1alpha1.ConditionStormGuardActive)
		return fmt.Sprintf("%s looks failed (%s) but is not fenced: the storm guard holds (%s: %s)", name, seen, c.Reason, c.Message)
	case pods != nil && pods.err == nil && len(pods.need) == 0:
		return fmt.Sprintf("%s looks failed (%s) but is not fenced: none of its pods needs fencing under policy %s, which fences only for %s; "+
			"the controller leaves it to Kubernetes, which replaces its pods once the node is NotReady", name, seen, p.Name, p.Spec.Workloads.Describe())
	case p.Spec.DryRun:
		return fmt.Sprintf("%s looks failed (%s) but is not fenced: policy %s is a dry run, so the controller only records a dry-run fence", name, seen, p.Name)
	}
	return fmt.Sprintf("%s looks failed (%s): %s (no NodeFence yet)", name, seen, aboutToFence(p, pods))
}

// aboutToFence says what the controller does with a failed node it is not held back from
// fencing: under workloads, whom it fences the node for.
func aboutToFence(p *v1alpha1.FencingPolicy, pods *nodePods) string {
	switch {
	case p.Spec.Workloads == nil:
		return "the controller is about to fence it"
	case pods == nil || pods.err != nil:
		return fmt.Sprintf("the controller fences it only for %s, and leaves it to Kubernetes if it holds none (its pods could not be read here)", p.Spec.Workloads.Describe())
	case len(pods.need) == 1:
		return fmt.Sprintf("the controller is about to fence it for pod %s (%s)", pods.need[0].name, pods.need[0].why)
	}
	return fmt.Sprintf("the controller is about to fence it for %d of its pods, listed above", len(pods.need))
}

// withoutAgent is the chain of a node with no signal on any path: without the methods that
// need its agent, and without the whole level of such a method (fencing/node_controller.go,
// methodsFor).
func withoutAgent(chain []v1alpha1.Method) []v1alpha1.Method {
	skip := map[string]bool{}
	for _, m := range chain {
		if needsAgent(m.Type) && m.Level != "" {
			skip[m.Level] = true
		}
	}
	var out []v1alpha1.Method
	for _, m := range chain {
		if !needsAgent(m.Type) && (m.Level == "" || !skip[m.Level]) {
			out = append(out, m)
		}
	}
	return out
}
