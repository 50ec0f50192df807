package fencing

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/detectors/sight"
)

// blindRecheck is how often a node held back because the controller is blind is looked at
// again. Looking sooner gains little: once the controller sees again, no Lease counts as
// expired before a fresh lease period (at least 2 s, the shortest leaseTimeout), and a node
// silent on every path is Dead no sooner than its kubelet's next renewal counted from then (one
// renewal interval and 1 s); and while blind, in a large cluster, every held-back node's look
// costs the controller a reconcile.
const blindRecheck = 2 * time.Second

// maxBlindNodeEvents is how many nodes get a ControllerBlind Event of their own in one blind
// spell. The policy's ControllerBlind condition and Event speak for all of them; an Event per
// node of a large cluster, each spell, is what an API server that is already too slow to show
// the controller its canary cannot take (make bench-scale: 3557 Event writes timed out in one
// run at 5000 nodes, and their retries held 8235 connections open).
const maxBlindNodeEvents = 10

// blindEvents counts the nodes given a ControllerBlind Event in the current blind spell.
type blindEvents struct {
	mu    sync.Mutex
	spell time.Time // the spell's LastLost
	nodes map[string]bool
}

// allow says whether node gets an Event in the spell that began at lost: the first
// maxBlindNodeEvents nodes do, each as often as it is held back (the API folds the repeats
// into a series).
func (b *blindEvents) allow(node string, lost time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.spell.Equal(lost) || b.nodes == nil {
		b.spell, b.nodes = lost, map[string]bool{}
	}
	if b.nodes[node] {
		return true
	}
	if len(b.nodes) >= maxBlindNodeEvents {
		return false
	}
	b.nodes[node] = true
	return true
}

// sightView is what the fencing controllers read of the controller's sight (sight.Tracker).
type sightView interface {
	Status() sight.Status
}

// subscriber lets a controller react at once when the controller's sight changes.
type subscriber interface {
	Subscribe(func(sight.Status))
}

// sightOf is the observer's sight tracker, nil without one.
func sightOf(o observe.Observer) sightView {
	s, _ := o.Sight.(sightView)
	return s
}

// blind holds back a node that would be fenced while the controller is blind (invariant 3):
// an outage of the API server or of the watch is not the node's fault. The Event's note stays
// the same through one blind spell, so that the API folds the repeats into one series; only
// the first maxBlindNodeEvents nodes of a spell get one.
func (r *NodeReconciler) blind(ctx context.Context, node *corev1.Node, obs detectors.Observation) (ctrl.Result, bool) {
	s := sightOf(r.Observer)
	if s == nil {
		return ctrl.Result{}, false
	}
	st := s.Status()
	if !st.Blind {
		return ctrl.Result{}, false
	}
	evented := r.blindEvents.allow(node.Name, st.LastLost)
	if evented {
		r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonControllerBlind, "Detect",
			"not fencing node %s (%s): the controller is blind since %s (%s: %s); once it sees again, every node's Lease gets a fresh lease period, and a node silent on every path counts as Dead once its kubelet's next renewal, counted from then, is missed",
			node.Name, obs.Verdict, st.LastLost.UTC().Format(time.RFC3339), st.Cause, st.Message)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("controller blind: not fencing", "cause", st.Cause, "verdict", obs.Verdict, "reason", obs.Reason, "event", evented)
	return ctrl.Result{RequeueAfter: blindRecheck}, true
}

// agentsSilent holds the fence of a node found Dead while other agents are silent to the
// controller although their nodes' kubelets still renew (observe.AgentsOfLiveNodesSilent): at
// least two, and more than half of those it can judge by (the agents it has heard and the
// nodes marked as running one; with AgentServiceAccount set, only those that have an agent pod:
// agentPodNodes), a node it cannot judge yet weighing as silent. A Dead verdict
// rests on the node's agent being silent (and no peer report reaching it, which comes with the
// other agents' heartbeats); when live nodes' agents fall silent together, the likelier cut is
// the controller's own heartbeat channel (its Service's endpoint, a network policy, its
// certificate), and a node whose kubelet alone died (its agent and peers would say alive)
// would read Dead and be powered off. The storm guard does not see it: a node whose kubelet
// renews after its agent's silence reads Healthy again. Invariants 3 and 4: nothing is fenced on
// that verdict until those agents are heard again or found silent on every path, and the Event
// says so. One silent agent is no such sign (it may be that agent's own fault), nor is a machine
// that went silent on every path (off, or cut off: the storm guard's case).
func (r *NodeReconciler) agentsSilent(ctx context.Context, node *corev1.Node, obs detectors.Observation, now time.Time) (ctrl.Result, bool) {
	if obs.Verdict != detectors.Dead || r.Observer.Heartbeats == nil {
		return ctrl.Result{}, false
	}
	marked, err := r.agentNodes(ctx, now)
	if err != nil {
		// Judged by the agents heard alone: what this controller knows for itself.
		ctrl.LoggerFrom(ctx).Error(err, "listing the nodes marked as running an agent; judging by the agents heard only")
	}
	cs := r.Observer.AgentsOfLiveNodesSilent(node.Name, now, marked, nil)
	if !channelSilent(cs) {
		return ctrl.Result{}, false
	}
	// Only nodes that still run an agent pod say anything of the channel: one the DaemonSet no
	// longer covers is silent for good. Read only when the hold would apply; a failed read
	// judges by every node heard or marked: the side that holds.
	podded := false // the nodes judged by all have an agent pod
	if runsAgent, err := r.agentPodNodes(ctx); err == nil && runsAgent != nil {
		if cs = r.Observer.AgentsOfLiveNodesSilent(node.Name, now, marked, runsAgent); !channelSilent(cs) {
			return ctrl.Result{}, false
		}
		podded = true
	}
	var who []string
	if len(cs.Silent) > 0 {
		who = append(who, fmt.Sprintf("%d are silent to the controller while their kubelets still renew their Leases (%s)", len(cs.Silent), firstFew(cs.Silent)))
	}
	if len(cs.Pending) > 0 {
		who = append(who, fmt.Sprintf("%d cannot be judged yet and weigh as silent: not heard since this controller began to listen or since the node fell silent, or their kubelets' next renewal not due yet (%s)", len(cs.Pending), firstFew(cs.Pending)))
	}
	var unheard string
	switch {
	case len(cs.Unheard) > 0 && podded:
		unheard = fmt.Sprintf("; %s marked as running an agent (annotation %s), with an agent pod, not heard since this controller began to listen (%s): check that those pods run",
			countOf(len(cs.Unheard), "node"), v1alpha1.AnnotationAgent, firstFew(cs.Unheard))
	case len(cs.Unheard) > 0:
		unheard = fmt.Sprintf("; %s marked as running an agent (annotation %s) not heard since this controller began to listen (%s): if one no longer runs an agent, remove its annotation",
			countOf(len(cs.Unheard), "node"), v1alpha1.AnnotationAgent, firstFew(cs.Unheard))
	}
	// An Event's note holds 1024 bytes at most (events.k8s.io/v1): the reason comes last.
	note := fmt.Sprintf("not fencing node %s: of the agents of the %d other nodes the controller judges by, %s%s; its heartbeat channel is then the likelier cut (the heartbeat Service's endpoint on the leader's pod, a network policy, its certificate), and the node's agent and peers may see it alive; it is fenced once most of those agents are heard again, or found silent on every path (a machine off). Found %s",
		node.Name, cs.Judged, strings.Join(who, " and "), unheard, obs.Reason)
	r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonAgentsSilent, "Detect", "%s", truncate(note, 1024))
	r.repeated(ctx, node.Name, "agents of live nodes silent: not fencing", "silent", len(cs.Silent), "pending", len(cs.Pending), "judged", cs.Judged)
	return ctrl.Result{RequeueAfter: blindRecheck}, true
}

// channelSilent says whether cs is the AgentsSilent hold's sign: at least two of the other
// nodes' agents quiet (silent, or pending: a node that cannot be judged yet may be silent, and
// weighs as such), and more than half of those judged by.
func channelSilent(cs observe.ChannelSilence) bool {
	quiet := len(cs.Silent) + len(cs.Pending)
	return quiet >= 2 && 2*quiet > cs.Judged
}

// markedFor is how long a list of the nodes marked as running an agent, or of the agents' pods,
// is used again: a node held by agentsSilent is looked at every blindRecheck, and many may be
// held at once.
const markedFor = 5 * time.Second

// markedNodes remembers a list of nodes, listed at a time.
type markedNodes struct {
	mu    sync.Mutex
	at    time.Time
	names []string
}

// agentPods remembers where pods of the agents' ServiceAccount were found (agentPodNodes).
type agentPods struct {
	mu sync.Mutex
	// at is when the pods were last listed, err that list's error.
	at  time.Time
	err error
	// seen is, by node, the last list that found a pod of the agents' ServiceAccount there.
	seen map[string]time.Time
}

// podGone is how long a node counts as running an agent after the last list that found one of
// the agents' pods there: through a rollout's gap (the old pod gone, the new one not created
// yet), the node is still one the agent DaemonSet covers.
const podGone = 2 * time.Minute

// podListTimeout bounds a list of the agents' pods.
const podListTimeout = 10 * time.Second

// agentPodNodes says which nodes run a pod of the agents' ServiceAccount: one bound to the node,
// or created for it and not bound yet (a DaemonSet's pod is pinned to its node by a required
// node affinity on metadata.name until the scheduler binds it), whatever its phase (a pod
// crash-looping, or being replaced, still says the node should run an agent), found by a list
// less than podGone ago. The pods are listed from the API server (they are not cached) at most
// every markedFor, a failed list too: its error is returned until the next. Nil when no
// AgentServiceAccount is set.
func (r *NodeReconciler) agentPodNodes(ctx context.Context) (func(node string) bool, error) {
	sa := r.AgentServiceAccount
	if sa.Name == "" {
		return nil, nil
	}
	p := &r.podded
	p.mu.Lock()
	defer p.mu.Unlock()
	now := r.now()
	if p.at.IsZero() || now.Sub(p.at) >= markedFor {
		var pods corev1.PodList
		// From the API server's watch cache (resourceVersion 0), not etcd: the hold needs
		// where the pods are, not the latest write. Bounded: the workers that reach the hold
		// meanwhile wait for this list.
		lctx, cancel := context.WithTimeout(ctx, podListTimeout)
		p.at, p.err = now, r.reader().List(lctx, &pods, client.InNamespace(sa.Namespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
		cancel()
		if p.err != nil {
			ctrl.LoggerFrom(ctx).Error(p.err, "listing the agents' pods; judging by every node heard or marked as running an agent until the next list", "in", markedFor)
		}
		if p.seen == nil {
			p.seen = map[string]time.Time{}
		}
		for i := range pods.Items {
			if pod := &pods.Items[i]; pod.Spec.ServiceAccountName == sa.Name {
				if node := podNode(pod); node != "" {
					p.seen[node] = now
				}
			}
		}
		for node, at := range p.seen {
			if now.Sub(at) >= podGone {
				delete(p.seen, node)
			}
		}
	}
	if p.err != nil {
		return nil, p.err
	}
	seen := maps.Clone(p.seen)
	return func(node string) bool { _, ok := seen[node]; return ok }, nil
}

// podNode is the node pod is bound to, or, not bound yet, the one a required node affinity on
// metadata.name pins it to (a DaemonSet's pod, which has one such term with one value; the first
// such term is taken); "" for none.
func podNode(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// agentNodes are the nodes marked as running an agent (v1alpha1.AnnotationAgent), from the
// cache (listed again after markedFor): the agents a controller that has not heard them yet (it
// started, or took over leadership, while the heartbeat channel was cut) still counts on.
func (r *NodeReconciler) agentNodes(ctx context.Context, now time.Time) ([]string, error) {
	r.marked.mu.Lock()
	defer r.marked.mu.Unlock()
	if !r.marked.at.IsZero() && !now.Before(r.marked.at) && now.Sub(r.marked.at) < markedFor {
		return r.marked.names, nil
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var out []string
	for i := range nodes.Items {
		if _, ok := nodes.Items[i].Annotations[v1alpha1.AnnotationAgent]; ok {
			out = append(out, nodes.Items[i].Name)
		}
	}
	r.marked.at, r.marked.names = now, out
	return out, nil
}

// markAgent marks node as running an agent (v1alpha1.AnnotationAgent) once this controller has
// heard its agent, one write per node for good: a controller that starts, or takes over, while
// the heartbeat channel is cut counts that agent among the silent (agentsSilent). A failed write
// is logged and tried again at the node's next look.
func (r *NodeReconciler) markAgent(ctx context.Context, node *corev1.Node) {
	if _, ok := node.Annotations[v1alpha1.AnnotationAgent]; ok || r.Observer.Heartbeats == nil {
		return
	}
	if _, _, heard := r.Observer.Heartbeats.Latest(node.Name); !heard {
		return
	}
	patch := client.MergeFrom(node.DeepCopy())
	metav1.SetMetaDataAnnotation(&node.ObjectMeta, v1alpha1.AnnotationAgent, r.now().UTC().Format(time.RFC3339))
	if err := r.Client.Patch(ctx, node, patch); client.IgnoreNotFound(err) != nil {
		ctrl.LoggerFrom(ctx).Error(err, "marking the node as running an agent", "annotation", v1alpha1.AnnotationAgent)
	}
}

// blindCondition is the policy's ControllerBlind condition: True while the controller is
// blind or inside the fresh lease period it gives every node's Lease after it sees again. The
// period holds back the Lease's expiry, not the Dead of a node silent on every path (its agent
// lost, its peers failing to reach it): that one waits for the kubelet's next renewal, missed,
// counted from the moment the controller sees again (classify), and the message says so. The
// period is the longest lease timeout the policy's nodes are judged with (timeout: the policy's,
// or longer for kubelets that renew less often than every half of it).
func blindCondition(st sight.Status, p *v1alpha1.FencingPolicy, timeout time.Duration, now time.Time) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionControllerBlind, ObservedGeneration: p.Generation}
	until := st.Since.Add(timeout)
	lost := st.LastLost.UTC().Format(time.RFC3339)
	switch {
	case st.Blind:
		c.Status, c.Reason = metav1.ConditionTrue, string(st.Cause)
		c.Message = fmt.Sprintf("the controller is blind since %s (%s): %s; nothing is fenced automatically until it sees its canary Lease again; then no node's Lease counts as expired before a lease period (%s) has passed, and a node whose agent and peers are silent too counts as Dead no sooner than its kubelet's next renewal, missed, counted from then",
			lost, st.Cause, st.Message, timeout)
	case now.Before(until):
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonFreshLeasePeriod
		c.Message = fmt.Sprintf("the controller could not see renewals from %s (%s: %s) and sees again since %s: every node gets a fresh lease period, so no node's Lease counts as expired before %s; a node whose agent and peers are silent too counts as Dead no sooner than its kubelet's next renewal, missed, counted from %s (one renewal interval and 1s)",
			lost, st.Cause, st.Message, st.Since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339), st.Since.UTC().Format(time.RFC3339))
	default:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonSeeing
		c.Message = fmt.Sprintf("the controller sees fresh renewals since %s (last lost at %s: %s)", st.Since.UTC().Format(time.RFC3339), lost, st.Cause)
	}
	return c
}

// setBlindCondition sets the policy's ControllerBlind condition (nothing without a sight
// tracker) and raises an Event when its status turns: Warning to True, Normal to False. It
// returns the end of the fresh lease period while the controller sees again inside one (zero
// otherwise): the condition turns False then.
func (r *PolicyReconciler) setBlindCondition(p *v1alpha1.FencingPolicy, timeout time.Duration, now time.Time) (freshUntil time.Time) {
	s := sightOf(r.Observer)
	if s == nil {
		return time.Time{}
	}
	st := s.Status()
	if until := st.Since.Add(timeout); !st.Blind && now.Before(until) {
		freshUntil = until
	}
	c := blindCondition(st, p, timeout, now)
	was := metav1.ConditionUnknown
	if old := meta.FindStatusCondition(p.Status.Conditions, c.Type); old != nil {
		was = old.Status
	}
	meta.SetStatusCondition(&p.Status.Conditions, c)
	if was == c.Status {
		return freshUntil
	}
	if c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonControllerBlind, "Sight", c.Message)
	} else if was == metav1.ConditionTrue {
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, ReasonControllerSeeing, "Sight", c.Message)
	}
	return freshUntil
}

// watchSight wakes every policy as soon as the controller's sight changes.
func (r *PolicyReconciler) watchSight() {
	if s, ok := r.Observer.Sight.(subscriber); ok {
		s.Subscribe(func(sight.Status) {
			if r.wakes != nil {
				r.wakes.wake(time.Now())
			}
		})
	}
}

func (r *PolicyReconciler) allPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1alpha1.FencingPolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: p.Name}})
	}
	return reqs
}
