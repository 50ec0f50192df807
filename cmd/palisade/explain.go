package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/lease"
)

const explainUsage = `usage: %[1]s explain NODE

Says why NODE is or is not being fenced, signal by signal and policy by policy:
  - the node: its Ready condition, its Lease in kube-node-lease (renew time and age against
    the policy's detection.leaseTimeout, default 20s), its boot ID, its fence and unfence
    request annotations, the out-of-service taint;
  - every FencingPolicy and whether its nodeSelector selects NODE, and the one the controller
    uses (of those that match, the first by name);
  - that policy's dry run, storm guard (StormGuardActive), the controller's sight
    (ControllerBlind), and whether its status lists NODE as unhealthy, with the detectors'
    verdict and why (they also hear the node's agent and its peers, which this tool cannot);
  - under a policy with workloads, which of the node's pods need its fence and why, by the
    controller's own rule (a StatefulSet's pod, one on a ReadWriteOnce volume, one the
    podSelector names), or that none does and a failed node is left to Kubernetes;
  - NODE's NodeFence: phase, method, trigger, conditions and its last steps.
The last line is the verdict, e.g. "node-2 is healthy: not fenced".

flags:
  --kubeconfig FILE, --context NAME  as for every command
`

func (a *app) explainCmd(ctx context.Context, kf *kubeFlags, args []string) error {
	fs := newFlagSet()
	kf.register(fs)
	args, err := a.parseArgs(fs, "explain", args)
	if err != nil {
		return err
	}
	name, err := nodeArg("explain", args)
	if err != nil {
		return err
	}
	c, err := a.connect(*kf)
	if err != nil {
		return err
	}
	return explain(ctx, c, a.out, name, a.name, a.now())
}

// explanation is everything explain reads about one node.
type explanation struct {
	name     string
	now      time.Time
	tool     string
	node     *corev1.Node // nil: the Node does not exist
	lease    *coordinationv1.Lease
	leaseErr error // the Lease could not be read (nil and no lease: it has none)
	matches  []policyMatch
	chosen   int // index into matches of the policy the controller uses, -1: none
	fence    *v1alpha1.NodeFence
	pods     *nodePods // nil: the node's pods are not read (no policy, or one without workloads)
}

func (e *explanation) policy() *v1alpha1.FencingPolicy {
	if e.chosen < 0 {
		return nil
	}
	return e.matches[e.chosen].policy
}

// explain writes why the node is or is not being fenced, ending with a one-line verdict.
func explain(ctx context.Context, c client.Client, w io.Writer, name, tool string, now time.Time) error {
	e, err := gather(ctx, c, name, tool, now)
	if err != nil {
		return err
	}
	writeNode(w, e)
	writePolicies(w, e)
	writePolicy(w, e)
	writeNodeFence(w, e)
	fmt.Fprintf(w, "\n%s\n", verdict(e))
	return nil
}

func gather(ctx context.Context, c client.Client, name, tool string, now time.Time) (*explanation, error) {
	e := &explanation{name: name, now: now, tool: tool, chosen: -1}
	node := &corev1.Node{}
	switch err := c.Get(ctx, client.ObjectKey{Name: name}, node); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, apiError(err, "get", nodesResource, "", name)
	default:
		e.node = node
	}
	policies, err := listPolicies(ctx, c)
	if err != nil {
		return nil, err
	}
	if e.fence, err = getNodeFence(ctx, c, name); err != nil {
		return nil, err
	}
	if e.node == nil && e.fence == nil {
		return nil, fmt.Errorf("node %s does not exist and has no NodeFence (kubectl get nodes lists the nodes)", name)
	}
	if e.node == nil {
		return e, nil
	}
	e.matches, e.chosen = matchPolicies(policies, e.node)
	if p := e.policy(); p != nil && p.Spec.Workloads != nil {
		e.pods = readPods(ctx, c, name, p.Spec.Workloads)
	}
	l := &coordinationv1.Lease{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: lease.Namespace, Name: name}, l); {
	case apierrors.IsNotFound(err):
	case err != nil:
		e.leaseErr = apiError(err, "get", leasesResource, lease.Namespace, name)
	default:
		e.lease = l
	}
	return e, nil
}

// writeNode shows the node's own signals and requests.
func writeNode(w io.Writer, e *explanation) {
	fmt.Fprintf(w, "Node %s\n", e.name)
	if e.node == nil {
		fmt.Fprintln(w, "  does not exist (deleted); its NodeFence is the record of its fence")
		return
	}
	n := e.node
	if c := readyCondition(n); c != nil {
		fmt.Fprintf(w, "  Ready:            %s (%s) since %s, last heartbeat %s: %s\n", c.Status, orDash(c.Reason),
			ago(e.now, c.LastTransitionTime.Time), ago(e.now, c.LastHeartbeatTime.Time), orDash(c.Message))
	} else {
		fmt.Fprintln(w, "  Ready:            no Ready condition (the kubelet has not reported)")
	}
	fmt.Fprintf(w, "  Lease:            %s\n", leaseText(e))
	fmt.Fprintf(w, "  Boot ID:          %s\n", orDash(n.Status.NodeInfo.BootID))
	fmt.Fprintf(w, "  Fence request:    %s\n", requestAnnotation(n, v1alpha1.AnnotationFenceRequest, v1alpha1.AnnotationFenceRequestedBy))
	fmt.Fprintf(w, "  Unfence request:  %s\n", requestAnnotation(n, v1alpha1.AnnotationUnfenceRequest, v1alpha1.AnnotationUnfenceRequestedBy))
	fmt.Fprintf(w, "  Out-of-service:   %s\n", taintText(n, e.now))
}

// leaseObservation is the API's view of the node as the controller's Lease detector judges it
// (detectors/lease), with the policy's lease timeout.
func leaseObservation(e *explanation) (detectors.Observation, time.Duration) {
	timeout := defaultLeaseTimeout
	if p := e.policy(); p != nil {
		timeout = leaseTimeout(p)
	}
	return lease.Observe(e.node, e.lease, timeout, e.now), timeout
}

func leaseText(e *explanation) string {
	obs, timeout := leaseObservation(e)
	source := "default, no policy selects the node"
	if p := e.policy(); p != nil {
		source = "policy " + p.Name
		if p.Spec.Detection.LeaseTimeout == nil {
			source += ", default"
		}
	}
	head := "none in " + lease.Namespace
	switch {
	case e.leaseErr != nil:
		head = "could not be read: " + e.leaseErr.Error()
	case e.lease != nil && e.lease.Spec.RenewTime != nil:
		head = fmt.Sprintf("%s/%s renewed %s (%s)", lease.Namespace, e.name, ago(e.now, e.lease.Spec.RenewTime.Time),
			e.lease.Spec.RenewTime.UTC().Format(time.RFC3339))
	case e.lease != nil:
		head = fmt.Sprintf("%s/%s never renewed", lease.Namespace, e.name)
	}
	if obs.Timeout > timeout {
		source += fmt.Sprintf("; this node judged with %s, %d of its kubelet's renewal intervals", obs.Timeout, lease.MinRenewals)
	}
	return fmt.Sprintf("%s; leaseTimeout %s (%s): %s on the API's view: %s", head, timeout, source, obs.Verdict, obs.Reason)
}

func requestAnnotation(n *corev1.Node, key, byKey string) string {
	v, ok := n.Annotations[key]
	if !ok {
		return "none"
	}
	text := fmt.Sprintf("%q, requested by %s", v, orUnknown(n.Annotations[byKey]))
	if _, err := requestText(v, "the value", "what the request is for"); err != nil {
		text += " (INVALID, the controller ignores it: " + err.Error() + ")"
	}
	return text
}

func taintText(n *corev1.Node, now time.Time) string {
	for _, t := range n.Spec.Taints {
		if t.Key == v1alpha1.TaintOutOfService {
			text := fmt.Sprintf("tainted %s=%s:%s", t.Key, t.Value, t.Effect)
			if t.TimeAdded != nil {
				text += ", added " + ago(now, t.TimeAdded.Time)
			}
			return text
		}
	}
	return "not tainted"
}

// writePolicies shows every policy and whether it selects the node.
func writePolicies(w io.Writer, e *explanation) {
	if e.node == nil {
		return
	}
	fmt.Fprintln(w, "\nPolicies (the controller uses the first by name whose nodeSelector selects the node):")
	if len(e.matches) == 0 {
		fmt.Fprintln(w, "  none: the cluster has no FencingPolicy")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, m := range e.matches {
		var state string
		switch {
		case m.err != nil:
			state = "invalid nodeSelector, ignored by the controller: " + m.err.Error()
		case i == e.chosen:
			state = "selects the node: USED"
		case m.matches:
			state = fmt.Sprintf("selects the node, not used (%s comes first)", e.policy().Name)
		default:
			state = "does not select the node"
		}
		if m.specErr != nil {
			state += fmt.Sprintf(" by the nodeSelector last in force (%s); its spec.nodeSelector does not parse: %v", m.selector, m.specErr)
		}
		dry := ""
		if m.policy.Spec.DryRun {
			dry = " [dry run]"
		}
		fmt.Fprintf(tw, "  %s%s\tnodeSelector %s\t%s\n", m.policy.Name, dry, m.selector, state)
	}
	tw.Flush()
}

// writePolicy shows what the chosen policy's status says about the cluster and the node.
func writePolicy(w io.Writer, e *explanation) {
	p := e.policy()
	if p == nil {
		return
	}
	fmt.Fprintf(w, "\nPolicy %s\n", p.Name)
	dry := "no"
	if p.Spec.DryRun {
		dry = "YES: decisions are recorded, no fencing or release step is taken"
	}
	fmt.Fprintf(w, "  Dry run:          %s\n", dry)
	fmt.Fprintf(w, "  Methods:          %s\n", methodList(p.Spec.Methods))
	if c := conditionTrue(p.Status.Conditions, v1alpha1.ConditionInvalidSpec); c != nil {
		fmt.Fprintf(w, "  INVALID SPEC:     %s: %s\n", c.Reason, c.Message)
	}
	if wl := p.Spec.Workloads; wl != nil {
		fmt.Fprintf(w, "  Workloads:        a failed node is fenced only for %s (a fence request or the node's deletion is fenced whatever it holds)\n", wl.Describe())
		writePods(w, e.name, p, e.pods)
	}
	guard := conditionText(p.Status.Conditions, v1alpha1.ConditionStormGuardActive)
	if limit, text := maxUnhealthy(p, int(p.Status.Nodes)); p.Status.Nodes > 0 {
		guard += fmt.Sprintf("; %d of %d nodes unhealthy, at most %d may be (maxUnhealthy %s)", p.Status.UnhealthyNodes, p.Status.Nodes, limit, text)
	}
	fmt.Fprintf(w, "  Storm guard:      %s\n", guard)
	fmt.Fprintf(w, "  Controller sight: %s\n", conditionText(p.Status.Conditions, v1alpha1.ConditionControllerBlind))
	if v := listedVerdict(p, e.name); v != nil {
		fmt.Fprintf(w, "  Detectors:        %s is listed unhealthy: %s: %s\n", e.name, v.Verdict, orDash(v.Reason))
	} else {
		fmt.Fprintf(w, "  Detectors:        %s is not listed unhealthy (the detectors combine its Lease, its agent's heartbeats and its peers' probes)\n", e.name)
	}
}

func conditionText(conds []metav1.Condition, typ string) string {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return typ + " not reported (the controller has not written it: is it running?)"
	}
	return fmt.Sprintf("%s=%s (%s): %s", c.Type, c.Status, c.Reason, c.Message)
}

func conditionTrue(conds []metav1.Condition, typ string) *metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil && c.Status == metav1.ConditionTrue {
		return c
	}
	return nil
}

func listedVerdict(p *v1alpha1.FencingPolicy, node string) *v1alpha1.NodeVerdict {
	for i, v := range p.Status.Unhealthy {
		if v.Node == node {
			return &p.Status.Unhealthy[i]
		}
	}
	return nil
}

// writeNodeFence shows the node's fence: its record, conditions and last steps.
func writeNodeFence(w io.Writer, e *explanation) {
	nf := e.fence
	if nf == nil {
		fmt.Fprintf(w, "\nNodeFence: none\n")
		return
	}
	fmt.Fprintf(w, "\nNodeFence %s\n", nf.Name)
	fmt.Fprintf(w, "  Phase:            %s, method %s, token %s\n", orDash(string(nf.Status.Phase)), orDash(nf.Status.Method), tokenText(nf))
	trigger := string(nf.Spec.Trigger)
	if nf.Spec.RequestedBy != "" {
		trigger += ", requested by " + nf.Spec.RequestedBy
	}
	if nf.Spec.Verdict != "" {
		trigger += ", verdict " + nf.Spec.Verdict
	}
	fmt.Fprintf(w, "  Trigger:          %s: %s\n", trigger, orDash(nf.Spec.Reason))
	dry := ""
	if nf.Spec.DryRun {
		dry = " (dry run)"
	}
	fmt.Fprintf(w, "  Policy:           %s%s; created %s\n", orDash(nf.Spec.PolicyName), dry, ago(e.now, nf.CreationTimestamp.Time))
	if boots := fenceBoots(nf); boots != "" {
		fmt.Fprintf(w, "  Boot IDs:         %s\n", boots)
	}
	if nf.Status.ReleasedTime != nil {
		fmt.Fprintf(w, "  Release:          done %s: %s deleted, %s released\n", ago(e.now, nf.Status.ReleasedTime.Time),
			countOf(int(nf.Status.PodsDeleted), "pod"), countOf(int(nf.Status.AttachmentsReleased), "volume attachment"))
	}
	if forced := nf.Status.AttachmentsForced; len(forced) > 0 {
		fmt.Fprintf(w, "  Forced detach:    freed from a CSI attacher that kept failing to detach them, never unpublished (the storage system may still publish their volumes to the node: check it there): %s\n",
			strings.Join(forced, ", "))
	}
	if r := nf.Status.Recovery; r != nil {
		fmt.Fprintf(w, "  Recovery:         %s, %s, by %s: %s\n", r.How, ago(e.now, r.Time.Time), orDash(r.RequestedBy), r.Reason)
	}
	if len(nf.Status.Conditions) > 0 {
		fmt.Fprintln(w, "  Conditions:")
	}
	for _, c := range nf.Status.Conditions {
		fmt.Fprintf(w, "    %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	steps := nf.Status.Steps
	const shown = 5
	if len(steps) > shown {
		fmt.Fprintf(w, "  Last steps (%d of %d):\n", shown, len(steps))
		steps = steps[len(steps)-shown:]
	} else if len(steps) > 0 {
		fmt.Fprintln(w, "  Steps:")
	}
	for _, s := range steps {
		fmt.Fprintf(w, "    %s\n", stepText(s, e.now))
	}
}

// fenceBoots lists the boot IDs a fence saw its node in up to its confirmation, which a reboot
// since the fence must differ from (the controller's rule, fencing/boots.go), "" for none.
func fenceBoots(nf *v1alpha1.NodeFence) string {
	s := nf.Status
	var parts []string
	if s.BootID != "" {
		parts = append(parts, s.BootID+" when the fence began")
	}
	if len(s.ConfirmedBootIDs) > 0 {
		parts = append(parts, strings.Join(s.ConfirmedBootIDs, ", ")+" at its confirmation")
	}
	if s.AgentBootID != "" {
		parts = append(parts, "its agent last heard in "+s.AgentBootID+
			" (unless a power-off was confirmed and not disproved, a reboot counts only once the agent heartbeats from the new boot too)")
	}
	return strings.Join(parts, "; ")
}

func stepText(s v1alpha1.Step, now time.Time) string {
	text := string(s.Name)
	if s.Method != "" {
		text += " " + s.Method
	}
	text += " " + string(s.State)
	if s.Reason != "" {
		text += " (" + s.Reason + ")"
	}
	text += ", " + ago(now, s.StartTime.Time)
	if s.Message != "" {
		text += ": " + s.Message
	}
	return text
}

// countOf is "1 pod", "2 pods".
func countOf(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %ss", n, one)
}

func tokenText(nf *v1alpha1.NodeFence) string {
	if nf.Status.Token == 0 {
		return "-"
	}
	return fmt.Sprint(nf.Status.Token)
}

// ago is how long before now t was, "never" for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		return fmt.Sprintf("%s in the future (clock skew?)", (-d).Round(time.Second))
	}
	return d.Round(time.Second).String() + " ago"
}
