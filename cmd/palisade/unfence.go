package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

const unfenceUsage = `usage: %[1]s unfence NODE --reason TEXT [--yes]

Confirms that a fenced NODE is clean, by setting its palisade.dev/unfence-request annotation
(a merge patch): its workload's processes are gone (the machine was reinstalled, or checked by
hand). Palisade unfences a node that is back (Ready) and rebooted since its fence by itself;
this confirmation is for a node that came back without a reboot (BootIDUnchanged), whose reboot
cannot be proven (BootIDUnknown; RebootUnconfirmed: its fence kept the machine on and its agent
has not heartbeated from the new boot the kubelet reports), that Palisade holds as Flapping, or
whose policy unfences only on request (AutomaticRecoveryOff). Once the node is Ready, Palisade
lifts its storage fences, removes the out-of-service taint it added and the request annotations, and ends
the NodeFence as Recovered (ConfirmedClean).

First it shows the NodeFence and its Recovered condition (why the node is held), then asks
"Unfence node NODE? [y/N]". Refused (exit status 1) when NODE has no NodeFence, or its fence is
not Released (still under way, Failed, a dry run, already Recovered) or was released a moment
ago and not yet looked at (no Recovered condition): the message says what to do instead; and
when the cluster's admission policy does not let you (its message says who may). A confirmation
of a node fenced by a power-off that comes back with the boot ID it had when fenced (it never
lost power: PowerOffDisproved) is removed, not honoured: confirm it again once it is stopped.

flags:
  --reason TEXT  how NODE was made clean (1 to 256 printable characters); the NodeFence
                 records it
  -y, --yes      do not ask
  --kubeconfig FILE, --context NAME  as for every command
`

// unfenceOptions are unfence's arguments.
type unfenceOptions struct {
	node, reason string
	yes          bool
	tool         string
}

func (a *app) unfenceCmd(ctx context.Context, kf *kubeFlags, args []string) error {
	opts := unfenceOptions{tool: a.name}
	fs := newFlagSet()
	kf.register(fs)
	fs.StringVar(&opts.reason, "reason", "", "how the node was made clean")
	fs.BoolVar(&opts.yes, "yes", false, "do not ask")
	fs.BoolVar(&opts.yes, "y", false, "do not ask")
	args, err := a.parseArgs(fs, "unfence", args)
	if err != nil {
		return err
	}
	if opts.node, err = nodeArg("unfence", args); err != nil {
		return err
	}
	if opts.reason, err = requestText(opts.reason, "--reason", "how the node was made clean"); err != nil {
		return err
	}
	c, err := a.connect(*kf)
	if err != nil {
		return err
	}
	return unfence(ctx, c, a.streams(), opts, time.Now())
}

// unfence shows why the node is held, asks, and sets the unfence request.
func unfence(ctx context.Context, c client.Client, s streams, opts unfenceOptions, now time.Time) error {
	nf, err := getNodeFence(ctx, c, opts.node)
	if err != nil {
		return err
	}
	if nf == nil {
		return fmt.Errorf("node %s has no NodeFence: Palisade has not fenced it, so there is nothing to unfence (%s explain %s says why it is not fenced)",
			opts.node, opts.tool, opts.node)
	}
	if err := unfenceable(nf, now); err != nil {
		return err
	}
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: opts.node}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("node %s no longer exists: there is nothing to unfence; its NodeFence is the record of its fence (delete it once you no longer need it)", opts.node)
		}
		return apiError(err, "get", nodesResource, "", opts.node)
	}
	printHeld(s.out, nf, node)
	if !opts.yes {
		if err := confirm(ctx, s, fmt.Sprintf("Unfence node %s?", node.Name)); err != nil {
			if errors.Is(err, errNotConfirmed) {
				return fmt.Errorf("node %s stays fenced: not confirmed (answer y, or pass --yes)", node.Name)
			}
			return err
		}
		// The question may have waited long: the answer is for the fence shown, not for one
		// that replaced it or moved on meanwhile.
		if err := sameFence(ctx, c, nf, opts.tool); err != nil {
			return err
		}
	}
	if err := annotate(ctx, c, node.Name, v1alpha1.AnnotationUnfenceRequest, opts.reason, "unfence request"); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "\nunfence requested: node %s carries %s=%q", node.Name, v1alpha1.AnnotationUnfenceRequest, opts.reason)
	if by := requestedBy(ctx, c, node.Name, v1alpha1.AnnotationUnfenceRequestedBy); by != "" {
		fmt.Fprintf(s.out, ", recorded as confirmed by %s", by)
	}
	fmt.Fprintf(s.out, ".\nPalisade unfences the node once it is Ready; follow it with: %s explain %s\n", opts.tool, node.Name)
	return nil
}

// sameFence refuses the answer when node's NodeFence is no longer the one shown (was): deleted,
// made anew, or gone on to another phase or to a recovery decision while the question waited.
func sameFence(ctx context.Context, c client.Client, was *v1alpha1.NodeFence, tool string) error {
	now, err := getNodeFence(ctx, c, was.Spec.NodeName)
	if err != nil {
		return err
	}
	again := fmt.Sprintf("nothing was set; run %s unfence %s again to see it as it is now", tool, was.Spec.NodeName)
	switch {
	case now == nil:
		return fmt.Errorf("the NodeFence of node %s was deleted while you answered: %s", was.Spec.NodeName, again)
	case now.UID != was.UID:
		return fmt.Errorf("the NodeFence of node %s was made anew while you answered (a new fence): %s", was.Spec.NodeName, again)
	case now.Status.Phase != was.Status.Phase:
		return fmt.Errorf("the NodeFence of node %s went from %s to %s while you answered: %s", was.Spec.NodeName, was.Status.Phase, now.Status.Phase, again)
	case (now.Status.Recovery == nil) != (was.Status.Recovery == nil):
		return fmt.Errorf("palisade decided the recovery of node %s while you answered: %s", was.Spec.NodeName, again)
	case (now.Status.PowerOffDisprovedTime == nil) != (was.Status.PowerOffDisprovedTime == nil):
		return fmt.Errorf("node %s came back with the boot ID it had when fenced while you answered: its power-off did not happen (PowerOffDisproved), and its workload may run; %s", was.Spec.NodeName, again)
	case recoveredReason(now) != recoveredReason(was):
		return fmt.Errorf("the fence of node %s is held for another reason now (%s, shown: %s): %s", was.Spec.NodeName, recoveredReason(now), recoveredReason(was), again)
	}
	return nil
}

// recoveredReason is the reason of nf's Recovered condition, "" without one.
func recoveredReason(nf *v1alpha1.NodeFence) string {
	if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); c != nil {
		return c.Reason
	}
	return ""
}

// unfenceable refuses a fence that an unfence request would not end: one that is not Released,
// or whose recovery is already decided.
func unfenceable(nf *v1alpha1.NodeFence, now time.Time) error {
	name := nf.Spec.NodeName
	switch phase := nf.Status.Phase; {
	case nf.Spec.DryRun:
		return fmt.Errorf("the NodeFence of node %s is a dry run (policy %s): nothing was fenced, so there is nothing to unfence; delete the record with kubectl delete nodefence %s",
			name, nf.Spec.PolicyName, nf.Name)
	case phase == v1alpha1.PhaseRecovered:
		how := ""
		if r := nf.Status.Recovery; r != nil {
			how = fmt.Sprintf(" (%s: %s)", r.How, r.Reason)
		}
		return fmt.Errorf("node %s is already unfenced: its NodeFence ended Recovered%s", name, how)
	case phase == v1alpha1.PhaseFailed:
		return fmt.Errorf("the fence of node %s failed and released nothing: the node was never taken out of service, so there is nothing to unfence. "+
			"Fix the cause (the Fenced condition says it; if a method powered the machine off, power it on), then delete the NodeFence: kubectl delete nodefence %s",
			name, nf.Name)
	case phase != v1alpha1.PhaseReleased:
		return fmt.Errorf("node %s is still being fenced (NodeFence phase %s, method %s, %s old): an unfence confirmation counts only once the fence is Released; wait for it",
			name, orDash(string(phase)), orDash(nf.Status.Method), now.Sub(nf.CreationTimestamp.Time).Round(time.Second))
	case nf.Status.Recovery != nil:
		r := nf.Status.Recovery
		return fmt.Errorf("Palisade is already unfencing node %s (%s: %s): nothing to confirm", name, r.How, r.Reason)
	case meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered) == nil:
		// The controller's first look after the release removes any request the node carries
		// then: it cannot tell one made a moment after the release from one made during the fence.
		return fmt.Errorf("node %s was just released and Palisade has not looked at it since (its NodeFence has no Recovered condition yet): "+
			"a request made now would be taken for one made during the fence, and removed; try again in a moment, once the condition says why the node is held", name)
	}
	return nil
}

// printHeld shows a released fence, why its node is held, and what confirming it clean does.
func printHeld(w io.Writer, nf *v1alpha1.NodeFence, node *corev1.Node) {
	fmt.Fprintf(w, "NodeFence %s: %s (method %s, trigger %s, policy %s)\n", nf.Name, nf.Status.Phase, orDash(nf.Status.Method), nf.Spec.Trigger, orDash(nf.Spec.PolicyName))
	if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); c != nil { // unfenceable refuses a fence without one
		fmt.Fprintf(w, "  Recovered=%s %s: %s\n", c.Status, c.Reason, c.Message)
	}
	fmt.Fprintf(w, "Node %s: Ready %s, boot ID %s (the fence's: %s)\n\n", node.Name, readyStatus(node), orDash(node.Status.NodeInfo.BootID), orDash(fenceBoots(nf)))
	fmt.Fprintf(w, "Palisade unfences a node that is back (Ready) and rebooted since its fence by itself. This confirmation is for a node that did not reboot, "+
		"whose reboot is not proven (after a fence that kept the machine on, its agent must heartbeat from the new boot too), "+
		"that Palisade holds as Flapping, or whose policy unfences only on request: it tells Palisade that the workload's processes on %s are gone (reinstalled, or checked by hand). "+
		"Palisade then lifts the node's storage fences, removes the out-of-service taint its fence added and the request annotations, and ends the NodeFence as Recovered (ConfirmedClean): "+
		"pods may run on %s again.\n", node.Name, node.Name)
	if readyStatus(node) != string(corev1.ConditionTrue) {
		fmt.Fprintf(w, "Note: %s is not Ready: Palisade unfences it only once it is Ready again, confirmation or not.\n", node.Name)
		// Any method of the confirmed level may have cut the power, not only status.method (the controller's rule).
		if method := nf.Status.PowerOffMethod(); nf.Status.BootID != "" && method != "" {
			fmt.Fprintf(w, "If it comes back with the boot ID it had when fenced (%s), its power-off by method %s did not happen: this confirmation is then removed (PowerOffDisproved).\n", nf.Status.BootID, method)
		}
	}
	if old, ok := node.Annotations[v1alpha1.AnnotationUnfenceRequest]; ok {
		fmt.Fprintf(w, "The node already carries an unfence request, %q (confirmed by %s): it is replaced.\n",
			old, orUnknown(node.Annotations[v1alpha1.AnnotationUnfenceRequestedBy]))
	}
	fmt.Fprintln(w)
}

// readyStatus is the status of the node's Ready condition, "Unknown" without one.
func readyStatus(node *corev1.Node) string {
	if c := readyCondition(node); c != nil {
		return string(c.Status)
	}
	return string(corev1.ConditionUnknown)
}

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}
