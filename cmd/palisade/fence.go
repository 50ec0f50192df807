package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

const fenceUsage = `usage: %[1]s fence NODE --reason TEXT [--yes] [--allow-dry-run]

Asks Palisade to fence NODE, by setting its palisade.dev/fence-request annotation (a merge
patch; the controller turns it into a NodeFence). First it says what will happen: the
FencingPolicy that selects NODE (of those whose nodeSelector matches, the first by name, as the
controller picks), its methods in the order they are tried, with their levels and timeouts (a
power method POWERS THE MACHINE OFF), and what is released once the fence is confirmed
(out-of-service taint, pod deletion, volume attachments). Then it asks "Fence node NODE? [y/N]".
The storm guard and the controller's blindness do not hold back a manual request.

Refused (exit status 1) when NODE does not exist, no FencingPolicy selects it, NODE has a
NodeFence that is not over, the reason is not 1 to 256 printable characters, or the cluster's
admission policy does not let you set the annotation (its message says who may). Under a
dry-run policy the controller only records what the fence would do (a NodeFence that takes no
step) and removes the request: nothing is fenced, then or when the policy later fences for
real (a request is acted on once). Refused unless --allow-dry-run.

flags:
  --reason TEXT    why NODE is to be fenced (1 to 256 printable characters); the NodeFence
                   records it
  -y, --yes        do not ask
  --allow-dry-run  under a dry-run policy, record the dry-run fence anyway (nothing is fenced,
                   and the controller removes the request once it is recorded)
  --kubeconfig FILE, --context NAME  as for every command
`

// fenceOptions are fence's arguments.
type fenceOptions struct {
	node, reason string
	yes          bool
	allowDryRun  bool
	tool         string // the tool's name, for the commands it suggests
}

func (a *app) fenceCmd(ctx context.Context, kf *kubeFlags, args []string) error {
	opts := fenceOptions{tool: a.name}
	fs := newFlagSet()
	kf.register(fs)
	fs.StringVar(&opts.reason, "reason", "", "why the node is to be fenced")
	fs.BoolVar(&opts.yes, "yes", false, "do not ask")
	fs.BoolVar(&opts.yes, "y", false, "do not ask")
	fs.BoolVar(&opts.allowDryRun, "allow-dry-run", false, "record a dry-run fence")
	args, err := a.parseArgs(fs, "fence", args)
	if err != nil {
		return err
	}
	if opts.node, err = nodeArg("fence", args); err != nil {
		return err
	}
	if opts.reason, err = requestText(opts.reason, "--reason", "why the node is to be fenced"); err != nil {
		return err
	}
	c, err := a.connect(*kf)
	if err != nil {
		return err
	}
	return fence(ctx, c, a.streams(), opts)
}

// fence shows what fencing opts.node will do, asks, and sets the fence request.
func fence(ctx context.Context, c client.Client, s streams, opts fenceOptions) error {
	node, err := getNode(ctx, c, opts.node)
	if err != nil {
		return err
	}
	policies, err := listPolicies(ctx, c)
	if err != nil {
		return err
	}
	matches, chosen := matchPolicies(policies, node)
	if chosen < 0 {
		return noPolicyError(node, matches)
	}
	p := matches[chosen].policy
	nf, err := getNodeFence(ctx, c, node.Name)
	if err != nil {
		return err
	}
	if err := fenceStands(nf, opts.tool); err != nil {
		return err
	}
	if p.Spec.DryRun && !opts.allowDryRun {
		return fmt.Errorf("policy %s, which selects node %s, is a dry run: the controller would only record the fence (a NodeFence Pending with Fenced=False DryRun), "+
			"take no step, and remove the request: nothing is fenced, then or when the policy later fences for real. Set spec.dryRun to false on policy %s to fence for real, "+
			"or pass --allow-dry-run to record the dry-run fence", p.Name, node.Name, p.Name)
	}
	printFencePlan(s.out, node, matches, chosen, opts)
	printBound(ctx, c, s.out, node.Name, p)
	printRecovery(s.out, node, p, nf, opts)
	question := fmt.Sprintf("Fence node %s?", node.Name)
	if p.Spec.DryRun {
		question = fmt.Sprintf("Record a dry-run fence of node %s (nothing is fenced)?", node.Name)
	}
	if !opts.yes {
		if err := confirm(ctx, s, question); err != nil {
			if errors.Is(err, errNotConfirmed) {
				return fmt.Errorf("node %s not fenced: not confirmed (answer y, or pass --yes)", node.Name)
			}
			return err
		}
	}
	if err := annotate(ctx, c, node.Name, v1alpha1.AnnotationFenceRequest, opts.reason, "fence request"); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "\nfence requested: node %s carries %s=%q", node.Name, v1alpha1.AnnotationFenceRequest, opts.reason)
	if by := requestedBy(ctx, c, node.Name, v1alpha1.AnnotationFenceRequestedBy); by != "" {
		fmt.Fprintf(s.out, ", recorded as requested by %s", by)
	}
	next := fmt.Sprintf("creates NodeFence %s and fences the node", node.Name)
	if p.Spec.DryRun {
		next = fmt.Sprintf("records the dry-run NodeFence %s and removes the request: nothing is fenced, now or when the policy later fences for real", node.Name)
	}
	fmt.Fprintf(s.out, ".\nPalisade %s; follow it with: %s explain %s (or kubectl get nodefence %s -w)\n", next, opts.tool, node.Name, node.Name)
	return nil
}

// noPolicyError says that no policy selects node, and what each policy selects.
func noPolicyError(node *corev1.Node, matches []policyMatch) error {
	if len(matches) == 0 {
		return fmt.Errorf("no FencingPolicy selects node %s: the cluster has none, so Palisade has no fencing method for it, and the controller would remove the request and fence nothing "+
			"(create a FencingPolicy whose nodeSelector matches the node)", node.Name)
	}
	var each []string
	for _, m := range matches {
		switch {
		case m.err != nil:
			each = append(each, fmt.Sprintf("%s (invalid selector, ignored: %v)", m.policy.Name, m.err))
		case m.specErr != nil:
			each = append(each, fmt.Sprintf("%s (%s, last in force: its spec.nodeSelector does not parse: %v)", m.policy.Name, m.selector, m.specErr))
		default:
			each = append(each, fmt.Sprintf("%s (%s)", m.policy.Name, m.selector))
		}
	}
	return fmt.Errorf("no FencingPolicy selects node %s (labels %s), so Palisade has no fencing method for it, and the controller would remove the request and fence nothing; the policies select: %s",
		node.Name, labelsText(node.Labels), strings.Join(each, "; "))
}

// fenceStands refuses a fence while the node has a NodeFence that is not over: the controller
// creates a new fence only for a node without one, or whose last one ended Recovered
// (fencing/node_controller.go, fenceable).
func fenceStands(nf *v1alpha1.NodeFence, tool string) error {
	if nf == nil || nf.Status.Phase == v1alpha1.PhaseRecovered {
		return nil
	}
	name := nf.Spec.NodeName
	switch phase := nf.Status.Phase; {
	case nf.Spec.DryRun:
		return fmt.Errorf("node %s already has a dry-run NodeFence (phase %s, policy %s): nothing was fenced; delete it (kubectl delete nodefence %s) before asking again",
			name, orDash(string(phase)), nf.Spec.PolicyName, nf.Name)
	case phase == v1alpha1.PhaseReleased:
		return fmt.Errorf("node %s is already fenced: its NodeFence is Released (method %s); to give the node back once it is clean, see %s explain %s and %s unfence",
			name, orDash(nf.Status.Method), tool, name, tool)
	case phase == v1alpha1.PhaseFailed:
		reason := ""
		if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionFenced); c != nil {
			reason = " (" + c.Reason + ": " + c.Message + ")"
		}
		return fmt.Errorf("node %s has a failed NodeFence%s: nothing was released. Fix the cause, then delete the NodeFence (kubectl delete nodefence %s): the controller fences the node again if it is still failed or still requested",
			name, reason, nf.Name)
	}
	return fmt.Errorf("node %s is already being fenced: NodeFence %s is %s (method %s, trigger %s, %s old); follow it with %s explain %s",
		name, nf.Name, orDash(string(nf.Status.Phase)), orDash(nf.Status.Method), nf.Spec.Trigger,
		time.Since(nf.CreationTimestamp.Time).Round(time.Second), tool, name)
}

// printFencePlan says what fencing the node will do.
func printFencePlan(w io.Writer, node *corev1.Node, matches []policyMatch, chosen int, opts fenceOptions) {
	p := matches[chosen].policy
	fmt.Fprintf(w, "Fence node %s, reason %q.\n\n", node.Name, opts.reason)
	fmt.Fprintf(w, "Policy: %s (nodeSelector %s)", p.Name, matches[chosen].selector)
	if others := otherMatches(matches, chosen); len(others) == 1 {
		fmt.Fprintf(w, "; %s also selects the node, but the controller uses the first by name", others[0])
	} else if len(others) > 1 {
		fmt.Fprintf(w, "; %s also select the node, but the controller uses the first by name", strings.Join(others, ", "))
	}
	fmt.Fprintln(w)
	if p.Spec.DryRun {
		fmt.Fprintf(w, "DRY RUN: policy %s takes no step. The fence is recorded (NodeFence %s, Pending, Fenced=False DryRun) and NOTHING is fenced or released; "+
			"the request is then removed, so turning the policy's dryRun off later fences nothing for it.\n", p.Name, node.Name)
	}
	fmt.Fprintln(w, "\nMethods, in order: each is tried until one is confirmed by read-back; a method that fails or times out hands over to the next. The methods of a level are all taken and must all be confirmed.")
	for i, st := range stages(p.Spec.Methods) {
		prefix := fmt.Sprintf("  %d. ", i+1)
		if st.level != "" {
			fmt.Fprintf(w, "%slevel %s, all of:\n", prefix, st.level)
			prefix = "     - "
		}
		for _, m := range st.methods {
			fmt.Fprintf(w, "%s%s (%s, timeout %s): %s\n", prefix, m.Name, m.Type, methodTimeout(m), describeMethod(m, node))
		}
	}
	if power := powerMethods(p.Spec.Methods); len(power) > 0 {
		fmt.Fprintf(w, "\nA power method (%s) POWERS THE MACHINE OFF: whatever still runs on %s stops at once.\n", strings.Join(power, ", "), node.Name)
	}
	fmt.Fprintf(w, "\nOnce a fence is confirmed and the node shows no sign of life for the verify window (%s), Palisade releases:\n", verifyWindow(p))
	steps := releaseSteps(p, node.Name)
	if len(steps) == 0 {
		fmt.Fprintln(w, "  nothing: the policy's release settings are all off")
	}
	for _, s := range steps {
		fmt.Fprintf(w, "  - %s\n", s)
	}
	fmt.Fprintln(w, "Nothing is released if every method fails.")
	fmt.Fprintln(w)
}

// printBound lists what a release would act on now: the pods bound to the node and its
// VolumeAttachments, when the user may list them.
func printBound(ctx context.Context, c client.Client, w io.Writer, node string, p *v1alpha1.FencingPolicy) {
	pods, err := boundPods(ctx, c, node)
	if err == nil {
		fmt.Fprintf(w, "On %s now: %s", node, countNames(pods, "pod", "pods"))
		if !enabled(p.Spec.Release.DeletePods) {
			fmt.Fprintf(w, " (policy %s does not delete them)", p.Name)
		}
		fmt.Fprintln(w, ".")
	}
	vas, err := attachments(ctx, c, node)
	if err == nil {
		fmt.Fprintf(w, "Attached to %s now: %s", node, countNames(vas, "volume attachment", "volume attachments"))
		if !enabled(p.Spec.Release.ReleaseAttachments) {
			fmt.Fprintf(w, " (policy %s does not release them)", p.Name)
		}
		fmt.Fprintln(w, ".")
	}
}

// printRecovery says when the node is given back, and notes what the request replaces.
func printRecovery(w io.Writer, node *corev1.Node, p *v1alpha1.FencingPolicy, previous *v1alpha1.NodeFence, opts fenceOptions) {
	fmt.Fprintf(w, "\nRecovery: %s.\n", recoveryText(p.Spec.Recovery, node.Name, opts.tool))
	if previous != nil && previous.Status.Phase == v1alpha1.PhaseRecovered {
		fmt.Fprintf(w, "The node's previous fence (recovered) is replaced; a fence soon after a recovery makes the node a flapping one.\n")
	}
	switch old, ok := node.Annotations[v1alpha1.AnnotationFenceRequest]; {
	case ok && strings.TrimSpace(old) == opts.reason:
		fmt.Fprintf(w, "The node already carries this very fence request (requested by %s): setting it again changes nothing and wakes nothing; "+
			"if no fence came of it, %s explain %s says why.\n", orUnknown(node.Annotations[v1alpha1.AnnotationFenceRequestedBy]), opts.tool, node.Name)
	case ok:
		fmt.Fprintf(w, "The node already carries a fence request, %q (requested by %s): it is replaced.\n", old, orUnknown(node.Annotations[v1alpha1.AnnotationFenceRequestedBy]))
	}
	fmt.Fprintln(w)
}

func otherMatches(matches []policyMatch, chosen int) []string {
	var names []string
	for i, m := range matches {
		if m.matches && i != chosen {
			names = append(names, m.policy.Name)
		}
	}
	return names
}

func powerMethods(ms []v1alpha1.Method) []string {
	var names []string
	for _, m := range ms {
		if powersOff(m.Type) {
			names = append(names, m.Name)
		}
	}
	return names
}

// requestedBy reads back who the API server recorded as the requester, "" when none is.
func requestedBy(ctx context.Context, c client.Client, node, key string) string {
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return ""
	}
	return n.Annotations[key]
}

func labelsText(l map[string]string) string {
	if len(l) == 0 {
		return "none"
	}
	return labels.Set(l).String()
}

func orUnknown(s string) string {
	if s == "" {
		return "an unrecorded user"
	}
	return s
}

// boundPods names the pods bound to node, namespace/name.
func boundPods(ctx context.Context, c client.Client, node string) ([]string, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(pods.Items))
	for _, p := range pods.Items {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return names, nil
}

// attachments names the VolumeAttachments of node, by their persistent volume when they name one.
func attachments(ctx context.Context, c client.Client, node string) ([]string, error) {
	var vas storagev1.VolumeAttachmentList
	if err := c.List(ctx, &vas); err != nil {
		return nil, err
	}
	var names []string
	for _, va := range vas.Items {
		if va.Spec.NodeName != node {
			continue
		}
		name := va.Name
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
			name = "PV " + *pv
		}
		names = append(names, name)
	}
	return names, nil
}

// countNames is "none", or the count and the first few names.
func countNames(names []string, one, many string) string {
	const shown = 5
	switch {
	case len(names) == 0:
		return "no " + many
	case len(names) == 1:
		return "1 " + one + ", " + names[0]
	case len(names) > shown:
		return fmt.Sprintf("%d %s, %s, ...", len(names), many, strings.Join(names[:shown], ", "))
	}
	return fmt.Sprintf("%d %s, %s", len(names), many, strings.Join(names, ", "))
}
