package fencing

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/providers/power"
)

// policyResync is how often a policy's status is refreshed while some of its nodes look failed,
// so that their recovery shows soon.
const policyResync = 5 * time.Second

// policyIdleResync is how often it is refreshed while none does: a pass observes every node it
// covers (about 0.15 s of a core at 5000 nodes, in make bench-scale's CPU profile), and the status
// then changes only with nodes late but not failed (Suspect), the nodes' count or labels, the
// other policies, or the kubelets' renewal intervals. Late nodes do not quicken it: on a loaded
// cluster some kubelet is nearly always late for a moment (make bench-scale at 5000 nodes: more
// than half the renewals over 11 s), and passes every 5 s for them cost as before. The node
// controller finding a node failed that its policy's status does not show yet wakes every
// policy (Wake) for a pass that observes its nodes; a change of the controller's sight wakes
// them too, for ControllerBlind, but that pass takes the nodes as the last one observed them
// (nodesSeen), as does any pass before the next is due, so that a controller whose sight
// flickers on a loaded API server does not observe 5000 nodes at every flicker. The nodes'
// verdicts move with sight too (a node's Lease counts from no sooner than the moment sight
// was last lost or regained, so a node failed on its Lease alone reads failed no more): the
// status shows them as last observed until the next observing pass, at most policyResync
// later while some looked failed.
const policyIdleResync = 30 * time.Second

// policyWakeGap is the least time between two wakes: while nodes keep turning failed one after
// another, the passes they start are at most one a second, and a wake inside the gap is sent at
// its end, not lost.
const policyWakeGap = time.Second

// PolicyReconciler keeps a FencingPolicy's status true: how many nodes it covers, how many look
// failed, and whether its storm guard holds (invariant 3: say so loudly).
type PolicyReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Observer observe.Observer
	Now      func() time.Time

	wakes  *wakes      // set up by SetupWithManager
	passes *lastPasses // set up by SetupWithManager; nil: every pass observes the nodes
}

// nodesSeen is what a policy's last pass that observed its nodes found, and the state it saw
// then: the policy (its UID: one deleted and created again under the same name starts at
// generation 1 again) and generation, and how many node wakes had been sent.
type nodesSeen struct {
	h          health
	uid        types.UID
	at         time.Time // the controller's clock at the pass (time.Now: a wall clock step moves no due time)
	generation int64
	nodeWakes  uint64
}

// every is how often the nodes are observed after this pass: every policyResync while some
// look failed, so that their recovery shows, else every policyIdleResync.
func (o nodesSeen) every() time.Duration {
	if len(o.h.Failed) > 0 {
		return policyResync
	}
	return policyIdleResync
}

// stands says whether a pass of p at now may take o's observations instead of observing the
// nodes again: the same policy and generation, no node wake since o (a node found failed that
// no status shows), and o's next pass not due yet.
func (o nodesSeen) stands(p *v1alpha1.FencingPolicy, nodeWakes uint64, now time.Time) bool {
	return o.uid == p.UID && o.generation == p.Generation && o.nodeWakes == nodeWakes && now.Before(o.at.Add(o.every()))
}

// lastPasses keeps each policy's last observing pass.
type lastPasses struct {
	mu   sync.Mutex
	last map[string]nodesSeen
}

func (l *lastPasses) get(policy string) (nodesSeen, bool) {
	if l == nil {
		return nodesSeen{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.last[policy]
	return o, ok
}

func (l *lastPasses) keep(policy string, o nodesSeen) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]nodesSeen{}
	}
	l.last[policy] = o
}

func (l *lastPasses) forget(policy string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, policy)
}

// SetupWithManager registers the reconciler.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	// Its own status writes need no second pass: the pass repeats (nextPass).
	r.wakes = &wakes{ch: make(chan event.GenericEvent, 1)}
	r.passes = &lastPasses{}
	b := ctrl.NewControllerManagedBy(mgr).Named("fencingpolicy").
		For(&v1alpha1.FencingPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.wakes.ch, handler.EnqueueRequestsFromMapFunc(r.allPolicies)))
	r.watchSight()
	return b.Complete(r)
}

// Wake has every policy's status refreshed soon: the node controller calls it when it judges a
// node of policy failed, which the status must show within a second, not at the next idle pass
// (it looks at a node just after the moment its signals would turn it failed). A node the last
// saved pass of its policy counted failed wakes nothing: the status shows it, and the policy's
// passes come every policyResync while it does; so a node held back (storm guard, blind, no
// method), looked at again every few seconds, does not wake the policies each time.
// Before SetupWithManager it does nothing: the first passes run when the manager starts.
func (r *PolicyReconciler) Wake(policy, node string) {
	if r.wakes != nil {
		r.wakes.wakeFor(policy, node, time.Now())
	}
}

// wakes coalesces wakes into at most one every policyWakeGap, the last of a burst sent at the
// end of its gap.
type wakes struct {
	ch      chan event.GenericEvent
	mu      sync.Mutex
	sent    time.Time
	pending bool
	// shown are, by policy, the nodes its last saved pass counted failed; skipped, the nodes
	// found failed since, whose wake shown made needless.
	shown, skipped map[string]map[string]bool
	// nodeWakes counts the wakes for failed nodes: a pass that begins with a count other than
	// its policy's last observing pass's observes the nodes again (nodesSeen.stands).
	nodeWakes uint64
}

// nodeWakeCount is how many wakes for failed nodes were sent so far (0 with no wakes).
func (w *wakes) nodeWakeCount() uint64 {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nodeWakes
}

// showing records the nodes policy's saved pass counted failed (none: forget the policy). A
// node whose wake was skipped since the pass before and that this pass does not count failed
// may have failed again after the pass observed it, with the set of the pass before still in
// place: it wakes the policies now.
func (w *wakes) showing(policy string, nodes []string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		set[n] = true
	}
	missed := false
	for n := range w.skipped[policy] {
		missed = missed || !set[n]
	}
	delete(w.skipped, policy)
	if len(nodes) == 0 {
		delete(w.shown, policy)
	} else {
		if w.shown == nil {
			w.shown = map[string]map[string]bool{}
		}
		w.shown[policy] = set
	}
	if missed {
		w.nodeWakes++
		w.wakeLocked(now)
	}
}

// wakeFor wakes the policies for node, failed, unless its policy's status shows it failed
// already.
func (w *wakes) wakeFor(policy, node string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shown[policy][node] {
		if w.skipped == nil {
			w.skipped = map[string]map[string]bool{}
		}
		if w.skipped[policy] == nil {
			w.skipped[policy] = map[string]bool{}
		}
		w.skipped[policy][node] = true
		return
	}
	w.nodeWakes++
	w.wakeLocked(now)
}

// wake wakes the policies (the controller's sight changed): their passes refresh
// ControllerBlind and take the nodes as last observed.
func (w *wakes) wake(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeLocked(now)
}

func (w *wakes) wakeLocked(now time.Time) {
	if w.pending {
		return // the wake due at the gap's end comes after this one
	}
	if wait := w.sent.Add(policyWakeGap).Sub(now); wait > 0 {
		w.pending = true
		time.AfterFunc(wait, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.pending = false
			w.send(time.Now())
		})
		return
	}
	w.send(now)
}

// send passes a wake on (w.mu held); one already waiting covers it.
func (w *wakes) send(now time.Time) {
	w.sent = now
	select {
	case w.ch <- event.GenericEvent{Object: &v1alpha1.FencingPolicy{}}:
	default:
	}
}

// nextPass is when a policy's status is refreshed again: when its nodes are due to be observed
// again (o.every after o), and at the end of the fresh lease period after the controller saw
// again (freshUntil) if that comes sooner, when its ControllerBlind condition turns False.
func nextPass(o nodesSeen, freshUntil, now time.Time) time.Duration {
	next := o.at.Add(o.every()).Sub(now)
	if freshUntil.After(now) {
		next = min(next, freshUntil.Sub(now))
	}
	return next
}

// Reconcile refreshes one policy's status.
func (r *PolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &v1alpha1.FencingPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			r.passes.forget(req.Name)
			if r.wakes != nil {
				r.wakes.showing(req.Name, nil, time.Now())
			}
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// The node wakes counted before the pass's moment: each came from a look at a node before
	// it, so observing the nodes at that moment covers them; a wake counted after it may
	// come from a look after it, at a node this pass judges too early.
	nodeWakes := r.wakes.nodeWakeCount()
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	// The pass's Events go out once its status is saved: an Event says a condition changed,
	// and a status write that fails leaves the condition unchanged, to be set (and said)
	// again by the next pass.
	held, recorder := &heldEvents{}, r.Recorder
	defer held.drop()
	rr := *r
	rr.Recorder = held
	r = &rr
	was := p.DeepCopy()
	invalid := invalidSpecCondition(p)
	if meta.SetStatusCondition(&p.Status.Conditions, invalid) && invalid.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, v1alpha1.ConditionInvalidSpec, "Validate", invalid.Message)
	}
	if sel, err := selectors.of(p); err == nil {
		s := sel.String()
		p.Status.NodeSelector = &s // in force until the spec's next parses (selectorCache.inForce)
	}
	// The nodes as this pass's policy last observed them, unless they are due to be observed
	// again (nodesSeen.stands).
	last, ok := r.passes.get(p.Name)
	looked := !ok || !last.stands(p, nodeWakes, now)
	if looked {
		last = nodesSeen{at: now, uid: p.UID, generation: p.Generation, nodeWakes: nodeWakes}
		// No selector in force covers no node (policyFor skips the policy).
		if _, err := selectors.inForce(p); err == nil {
			if last.h, err = policyHealth(ctx, r.Observer, p, now); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	h := last.h
	p.Status.ObservedGeneration = p.Generation
	p.Status.Nodes, p.Status.UnhealthyNodes, p.Status.Unhealthy = int32(h.Nodes), int32(h.Unhealthy), slices.Clone(h.Listed) // h is kept
	guard := metav1.Condition{Type: v1alpha1.ConditionStormGuardActive, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonWithinLimit, ObservedGeneration: p.Generation,
		Message: fmt.Sprintf("%d of %d nodes look failed or late (Suspect); fencing allowed up to %d", h.Unhealthy, h.Nodes, h.MaxUnhealthy)}
	if h.Blocked() {
		guard.Status, guard.Reason = metav1.ConditionTrue, v1alpha1.ReasonTooManyUnhealthy
		guard.Message = fmt.Sprintf("%d of %d nodes look failed or late (Suspect), more than %d: automatic fencing is stopped; the controller or the API server may be the one cut off", h.Unhealthy, h.Nodes, h.MaxUnhealthy)
	}
	policyUnhealthyNodes.WithLabelValues(p.Name).Set(float64(h.Unhealthy))
	stormGuardActive.WithLabelValues(p.Name).Set(map[bool]float64{true: 1}[h.Blocked()])
	if meta.SetStatusCondition(&p.Status.Conditions, guard) && h.Blocked() {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonStormGuard, "Guard", guard.Message)
	}
	if overlap, ok := overlappingCondition(p, h.Taken); !ok {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionOverlapping)
	} else if meta.SetStatusCondition(&p.Status.Conditions, overlap) {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, v1alpha1.ReasonNodesTaken, "Validate", overlap.Message)
	}
	freshUntil := r.setBlindCondition(p, max(leaseTimeout(p), h.RaisedTo), now)
	r.setLeaseTimeoutCondition(p, h)
	if tls, ok := insecureTLSCondition(p); !ok {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionInsecureTLS)
	} else if meta.SetStatusCondition(&p.Status.Conditions, tls) && tls.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, v1alpha1.ConditionInsecureTLS, "Validate", tls.Message)
	}
	// A pass that changed nothing writes nothing: an idle cluster's passes cost no request.
	if !equality.Semantic.DeepEqual(was.Status, p.Status) {
		if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(was)); err != nil {
			return ctrl.Result{}, fmt.Errorf("updating status of policy %s: %w", p.Name, err)
		}
	}
	held.send(recorder)
	// A pass that took the last one's observations shows the same failed nodes: the nodes
	// whose wakes were skipped since wait for the next pass that observes them.
	if looked {
		r.passes.keep(p.Name, last)
		if r.wakes != nil {
			r.wakes.showing(p.Name, h.Failed, time.Now())
		}
	}
	return ctrl.Result{RequeueAfter: nextPass(last, freshUntil, now)}, nil
}

// heldEvents is an EventRecorder that keeps its Events until send passes them on.
type heldEvents struct {
	events []func(events.EventRecorder)
}

func (h *heldEvents) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	h.events = append(h.events, func(to events.EventRecorder) { to.Eventf(regarding, related, eventtype, reason, action, note, args...) })
}

// send delivers the Events held, in order, once.
func (h *heldEvents) send(to events.EventRecorder) {
	for _, e := range h.events {
		e(to)
	}
	h.events = nil
}

// drop forgets the Events of a pass that did not save its status.
func (h *heldEvents) drop() { h.events = nil }

// setLeaseTimeoutCondition sets the policy's LeaseTimeoutRaised condition while some of its
// nodes are judged with a longer lease timeout than its own, with a Warning Event when it
// appears, and removes it once none is: it then says nothing a healthy policy needs said.
func (r *PolicyReconciler) setLeaseTimeoutCondition(p *v1alpha1.FencingPolicy, h health) {
	if h.Raised == 0 {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionLeaseTimeoutRaised)
		return
	}
	c := leaseTimeoutCondition(p, h)
	was := meta.FindStatusCondition(p.Status.Conditions, c.Type)
	if meta.SetStatusCondition(&p.Status.Conditions, c) && was == nil {
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, v1alpha1.ConditionLeaseTimeoutRaised, "Detect", c.Message)
	}
}

// leaseTimeoutCondition is the policy's LeaseTimeoutRaised condition for h.Raised nodes: their
// kubelets renew their Lease less often than every half of detection.leaseTimeout, so the
// detectors judge them with two of their renewal intervals instead (lease.Timeout). The
// message says how many, how slow, the timeout used, and the two ways out.
func leaseTimeoutCondition(p *v1alpha1.FencingPolicy, h health) metav1.Condition {
	timeout := leaseTimeout(p)
	// The kubelet renews every quarter of its nodeLeaseDurationSeconds.
	maxDuration := int64(4 * timeout / lease.MinRenewals / time.Second)
	return metav1.Condition{Type: v1alpha1.ConditionLeaseTimeoutRaised, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonShorterThanTwoRenewals, ObservedGeneration: p.Generation,
		Message: fmt.Sprintf("%d of %d nodes renew their Lease less often than every %s (the slowest every %s): spec.detection.leaseTimeout %s would count them failed between two renewals made on time, so they are judged with %d of their own renewal intervals instead (%s for the slowest); set leaseTimeout to %s or more, or those kubelets' nodeLeaseDurationSeconds to %d or less",
			h.Raised, h.Nodes, timeout/lease.MinRenewals, h.RaisedTo/lease.MinRenewals, timeout, lease.MinRenewals, h.RaisedTo, h.RaisedTo, maxDuration)}
}

// overlappingCondition is the policy's Overlapping condition from taken, the nodes its selector
// matches that policies before it by name cover, by policy: a new catch-all policy named
// before the others (or a dry-run one, "audit") takes their nodes silently otherwise. A policy
// that overlaps none has none (ok false).
func overlappingCondition(p *v1alpha1.FencingPolicy, taken map[string]int) (c metav1.Condition, ok bool) {
	if len(taken) == 0 {
		return c, false
	}
	c = metav1.Condition{Type: v1alpha1.ConditionOverlapping, ObservedGeneration: p.Generation}
	var by []string
	total := 0
	for _, name := range slices.Sorted(maps.Keys(taken)) {
		by = append(by, fmt.Sprintf("%d by policy %s", taken[name], name))
		total += taken[name]
	}
	c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonNodesTaken
	c.Message = fmt.Sprintf("%s that its node selector matches %s covered by policies that sort before it by name (%s): the first policy by name covers a node, and those are fenced by its rules (its methods, dryRun, storm guard), not this one's; narrow a selector so that they do not overlap, or rename the policies to order them",
		countOf(total, "node"), map[bool]string{true: "is", false: "are"}[total == 1], strings.Join(by, ", "))
	return c, true
}

// insecureTLSCondition is the policy's InsecureTLS condition: True, naming the methods, while
// one of them skips the verification of its BMCs' certificates. A policy without a method that
// talks TLS to a BMC (Redfish) has none (ok false).
func insecureTLSCondition(p *v1alpha1.FencingPolicy) (c metav1.Condition, ok bool) {
	var insecure []string
	for _, m := range p.Spec.Methods {
		var skip bool
		switch {
		case m.Type == v1alpha1.MethodRedfish && m.Redfish != nil:
			skip = m.Redfish.InsecureSkipVerify
		case m.Type == v1alpha1.MethodVSphere && m.VSphere != nil:
			skip = m.VSphere.InsecureSkipVerify
		default:
			continue
		}
		ok = true
		if skip {
			insecure = append(insecure, m.Name)
		}
	}
	c = metav1.Condition{Type: v1alpha1.ConditionInsecureTLS, Status: metav1.ConditionFalse, ObservedGeneration: p.Generation,
		Reason: v1alpha1.ReasonCertificatesVerified, Message: "every method verifies the certificates of the endpoints it talks to"}
	if len(insecure) > 0 {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonCertificatesUnverified
		c.Message = fmt.Sprintf("method(s) %s skip the verification of the certificates of the BMCs or vCenter they talk to (insecureSkipVerify): anyone on the path can take the credentials and answer for them, even that a node is off; set caBundleSecretRef instead",
			strings.Join(insecure, ", "))
	}
	return c, ok
}

// methodSettingProblem says what of m's settings no fence could use, as the CRD's rules now
// refuse it (a policy stored before them): "" when nothing.
func methodSettingProblem(m v1alpha1.Method) string {
	var refs []*v1alpha1.SecretReference
	var bad []string
	switch {
	case m.IPMI != nil:
		refs = append(refs, &m.IPMI.CredentialsSecretRef)
	case m.Redfish != nil:
		refs = append(refs, &m.Redfish.CredentialsSecretRef, m.Redfish.CABundleSecretRef)
	case m.AWS != nil:
		refs = append(refs, m.AWS.CredentialsSecretRef)
	case m.VSphere != nil:
		refs = append(refs, &m.VSphere.CredentialsSecretRef, m.VSphere.CABundleSecretRef)
		if _, _, err := power.SplitAddress(m.VSphere.Server, "443"); err != nil || strings.Contains(m.VSphere.Server, "/") {
			bad = append(bad, fmt.Sprintf("vsphere.server %q is not host[:port] (no scheme, no path)", m.VSphere.Server))
		}
	case m.StorageGateway != nil:
		refs = append(refs, &m.StorageGateway.TLSSecretRef)
		for _, gw := range m.StorageGateway.Gateways {
			if _, _, err := net.SplitHostPort(gw); err != nil {
				bad = append(bad, fmt.Sprintf("storageGateway.gateways entry %q is not host:port (the gateways' port, 9446 by the chart)", gw))
			}
		}
	}
	for _, r := range refs {
		if r == nil {
			continue
		}
		if errs := validation.IsDNS1123Label(r.Namespace); len(errs) > 0 {
			bad = append(bad, fmt.Sprintf("Secret namespace %q: %s", r.Namespace, errs[0]))
		}
		if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
			bad = append(bad, fmt.Sprintf("Secret name %q: %s", r.Name, errs[0]))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("method %s: %s: its fences fail there (BadTarget) and the chain goes on", m.Name, strings.Join(bad, "; "))
}

// agentMethodNotFirst names the first level that lists a method acting through the node's
// agent after another of its methods, and why that level is never taken automatically; "" when
// none does. methodsFor drops such a level from a Dead node's chain, and fences a node alive on
// other signals only through a chain whose first method needs the agent.
func agentMethodNotFirst(chain []v1alpha1.Method) string {
	chain = levelOrder(chain)
	for i, m := range chain {
		if !methodKinds[m.Type].needsAgent || m.Level == "" {
			continue
		}
		if first, _ := levelSpan(chain, i); first < i {
			return fmt.Sprintf("level %s lists method %s (%s), which acts through the node's agent, after method %s: the level is never taken automatically (a Dead node's chain drops it, a node alive on other signals is fenced only by a chain that starts with the agent's method) and a power-off before it would leave it nothing to stop; list %s first in its level",
				m.Level, m.Name, m.Type, chain[first].Name, m.Name)
		}
	}
	return ""
}

// invalidSpecCondition is the policy's InvalidSpec condition: True, naming every problem and
// what to change, while the controller cannot use the spec as written. The CRD's rules refuse
// most of these at the API server; a policy stored before a rule was added, or a node selector
// whose label keys no rule of the CRD checks, still reaches the controller.
func invalidSpecCondition(p *v1alpha1.FencingPolicy) metav1.Condition {
	var reasons, problems []string
	if _, err := selectors.of(p); err != nil {
		reasons = append(reasons, v1alpha1.ReasonNodeSelectorInvalid)
		if _, ok := p.LastNodeSelector(); ok {
			problems = append(problems, fmt.Sprintf("spec.nodeSelector does not parse (%v): until it is fixed the policy goes on covering the nodes of the selector last in force (status.nodeSelector %q)", err, *p.Status.NodeSelector))
		} else {
			problems = append(problems, fmt.Sprintf("spec.nodeSelector does not parse (%v): the policy covers no node until it is fixed, and the nodes it would select fall to the next policy that selects them, by name, or to none", err))
		}
	}
	if _, err := v1alpha1.NewWorkloadRule(p.Spec.Workloads); err != nil {
		reasons = append(reasons, v1alpha1.ReasonPodSelectorInvalid)
		problems = append(problems, fmt.Sprintf("spec.%v: no failed node of the policy is fenced automatically until it is fixed (fence requests and node deletions still are)", err))
	}
	if _, err := stormGuard(p); err != nil {
		reasons = append(reasons, v1alpha1.ReasonStormGuardInvalid)
		problems = append(problems, err.Error())
	}
	for _, m := range p.Spec.Methods {
		if m.Type != v1alpha1.MethodSelfFence || m.SelfFence == nil {
			continue
		}
		if timeout := methodTimeout(m); timeout <= m.SelfFence.SafeAfter.Duration {
			reasons = append(reasons, v1alpha1.ReasonSelfFenceTimeoutTooShort)
			problems = append(problems, fmt.Sprintf("method %s: its timeout (%s) does not exceed selfFence.safeAfter (%s), so it can only time out (MethodTimedOut) and every fence moves on to the next method: raise timeout or lower safeAfter",
				m.Name, timeout, m.SelfFence.SafeAfter.Duration))
		}
	}
	for _, m := range p.Spec.Methods {
		if problem := methodSettingProblem(m); problem != "" {
			reasons = append(reasons, v1alpha1.ReasonMethodSettingInvalid)
			problems = append(problems, problem)
		}
	}
	if problem := agentMethodNotFirst(p.Spec.Methods); problem != "" {
		reasons = append(reasons, v1alpha1.ReasonAgentMethodNotFirstInLevel)
		problems = append(problems, problem)
	}
	c := metav1.Condition{Type: v1alpha1.ConditionInvalidSpec, Status: metav1.ConditionFalse, ObservedGeneration: p.Generation,
		Reason: v1alpha1.ReasonSpecUsable, Message: "the controller can use the policy as written"}
	if len(problems) > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, reasons[0], truncate(strings.Join(problems, "; "), 32768)
	}
	return c
}
