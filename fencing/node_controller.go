package fencing

import (
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/observe"
)

const (
	// stormRecheck is how often a node held back by the storm guard is looked at again.
	stormRecheck = 5 * time.Second
	// aliveRecheck is how often a node seen alive by its agent or peers is looked at again.
	aliveRecheck = time.Second
)

// NodeReconciler decides whether a node is to be fenced: a valid manual request, or a failed
// verdict from the detectors under a policy whose storm guard allows it. It creates the
// NodeFence (named after the node) and leaves the rest to NodeFenceReconciler.
type NodeReconciler struct {
	Client client.Client
	// APIReader reads a failed node's pods, their claims and PodDisruptionBudgets straight from
	// the API server (workloads.go); Client when nil.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Observer  observe.Observer
	Now       func() time.Time
	// Leader, when set, says whether this replica still holds the leader-election Lease; no
	// NodeFence is created when it does not (leading.go). Nil: no leader election.
	Leader LeaderCheck
	// Concurrency is how many nodes are looked at at once (0: DefaultConcurrency), so that a
	// rack lost at once gets its fences created together rather than one after another (each
	// creation reads the node's pods from the API server). A node is never in two workers at
	// once; the storm guard counts the nodes it observes failed, not the fences created, so
	// workers side by side see the same count.
	Concurrency int
	// AgentServiceAccount, when set, is the agents' ServiceAccount (the DaemonSet's pods run as
	// it): the AgentsSilent hold then judges the channel only by nodes that have such a pod
	// (bound, or created for the node, seen within podGone: agentPodNodes), so that a node the
	// agent DaemonSet no longer covers (narrowed, or the agent uninstalled) does not count as
	// an agent silent for ever (sight.go). Zero: every node heard or marked counts.
	AgentServiceAccount types.NamespacedName
	// WakePolicies, when set, is called with a node's policy and name each time the node is
	// judged failed: the policies' status, refreshed only every policyIdleResync while no node
	// is, must show it now (PolicyReconciler.Wake).
	WakePolicies func(policy, node string)

	blindEvents blindEvents
	// looks are the nodes judged not failed by their latest reconcile, with a look again
	// pending at their Deadline (lease_events.go).
	looks lookPending
	// said thins the lines every recheck of a node repeats (repeats.go).
	said repeats
	// answered keeps the requests answered without being acted on, each said once (answers.go).
	answered saidOnce
	// marked remembers the nodes marked as running an agent for a while, podded where the
	// agents' pods are (sight.go).
	marked markedNodes
	podded agentPods
}

// SetupWithManager watches Nodes, their Leases, policies and NodeFences.
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetName()}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).Named("node").
		For(&corev1.Node{}).
		Watches(&coordinationv1.Lease{}, r.leaseEvents()).
		Watches(&v1alpha1.NodeFence{}, byName).
		// A policy's spec decides its nodes; its status (rewritten every policyResync while a
		// node is listed failed) would wake every node of the cluster for nothing.
		Watches(&v1alpha1.FencingPolicy{}, handler.EnqueueRequestsFromMapFunc(r.allNodes),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers(r.Concurrency)})
	if r.Observer.Heartbeats != nil {
		w := newAgentLossWatch(r.Observer.Heartbeats, r.Observer.IntervalFor, r.now)
		if err := mgr.Add(w); err != nil {
			return fmt.Errorf("adding the agent loss watch: %w", err)
		}
		b = b.WatchesRawSource(source.Channel(w.events, &handler.EnqueueRequestForObject{})).
			WatchesRawSource(source.Channel(w.firstHeard, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// Reconcile looks at one node.
func (r *NodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.looks.set(req.Name, false) // until detect judges it not failed again
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, node); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetNode(req.Name)
			r.said.forget(req.Name)
			r.answered.forget(req.Name, "")
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !node.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.deleted(ctx, node) // node_deletion.go
	}
	policy, err := policyFor(ctx, r.Client, node)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.keepFinalizer(ctx, node, policy); err != nil {
		return ctrl.Result{}, err
	}
	r.markAgent(ctx, node) // sight.go
	previous, free, err := r.fenceable(ctx, node.Name, policy)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.sayOnce(ctx, node, v1alpha1.AnnotationUnfenceRequest, unfenceRequestIgnored); err != nil { // answers.go
		ctrl.LoggerFrom(ctx).Error(err, "answering the node's unfence request; the node is judged all the same")
	}
	standing := !free && previous != nil // a dry run's record: it takes no step, but a request is still answered
	if !free && !standing {
		// A fence on record is not over: NodeFenceReconciler owns it; a request made meanwhile
		// is told what becomes of it.
		return ctrl.Result{}, r.sayOnce(ctx, node, v1alpha1.AnnotationFenceRequest, fenceRequestWaiting(policy))
	}
	if done, err := r.manualRequest(ctx, node, policy, previous, standing); done || err != nil || standing {
		return ctrl.Result{}, err
	}
	if policy == nil {
		return ctrl.Result{}, nil
	}
	return r.detect(ctx, node, policy, previous)
}

// fenceable says whether the node may be fenced anew: free when it has no NodeFence, or one
// that ended with the node unfenced (Recovered), or a dry run's record while the node's policy
// p now fences for real — which it returns as previous (a new fence replaces it). A fence on
// record that is not over (under way, released and not recovered, failed) stands, and the node
// is not free; so does a dry run's record while the policy is still in dry run (or there is
// none), which it returns as previous all the same: it takes no step, and a request made while
// it stands is still answered (manualRequest), not kept to fence the node later.
func (r *NodeReconciler) fenceable(ctx context.Context, node string, p *v1alpha1.FencingPolicy) (previous *v1alpha1.NodeFence, free bool, err error) {
	nf := &v1alpha1.NodeFence{}
	err = r.Client.Get(ctx, client.ObjectKey{Name: node}, nf)
	switch {
	case apierrors.IsNotFound(err):
		return nil, true, nil
	case err != nil:
		return nil, false, err
	case nf.Status.Phase == v1alpha1.PhaseRecovered:
		return nf, true, nil
	case nf.Spec.DryRun && nf.DeletionTimestamp.IsZero() && p != nil && !p.Spec.DryRun:
		// A dry run's record took no step; once the node's policy fences for real, it must not
		// stand in the way of the fence it only described.
		return nf, true, nil
	case nf.Spec.DryRun && nf.DeletionTimestamp.IsZero():
		return nf, false, nil
	}
	return nil, false, nil
}

// manualRequest handles the fence-request annotation; done says it was acted on (a fence
// created, or the request answered and removed), or that the cached Node's request is not the
// API server's, so that nothing is decided on the stale copy. standing says that previous is a
// dry run's record that stands (fenceable): no fence is made, and the request is answered.
//
// A request is acted on once: one recorded as a dry run, or one no policy covers, is removed
// from the Node with an event that says so. Left there, it would fence the node for real the
// moment its policy turned dryRun off or a policy came to select the node (a policy's change
// wakes every node), long after its requester was told that nothing was fenced.
func (r *NodeReconciler) manualRequest(ctx context.Context, node *corev1.Node, p *v1alpha1.FencingPolicy, previous *v1alpha1.NodeFence, standing bool) (bool, error) {
	reason, present, err := parseFenceRequest(node)
	if !present {
		return false, nil
	}
	if err != nil {
		r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonInvalidFenceRequest, "FenceRequest",
			"fence request ignored: %v", err)
		return false, nil
	}
	if node, err = r.confirmRequest(ctx, node); node == nil || err != nil {
		return true, err // not on the API server's copy (yet): nothing to act on until the cache has it
	}
	by := orUnknown(requester(node))
	if p == nil || p.Spec.DryRun || standing {
		// A request is dropped on the API server's word, not the cache's: a policy created or
		// turned to fence for real a moment ago would otherwise lose the request it was made for.
		// While the two differ, nothing is decided; the policy's event wakes the node again.
		if same, err := r.samePolicy(ctx, node, p); !same || err != nil {
			return true, err
		}
	}
	if p == nil {
		return true, r.dropRequest(ctx, node, corev1.EventTypeWarning, ReasonNoPolicy,
			"fence request %q (requested by %s) removed: no FencingPolicy covers node %s, so nothing was fenced; request again once one does",
			reason, by, node.Name)
	}
	if !standing {
		nf := newNodeFence(node, p, v1alpha1.TriggerManual, reason)
		nf.Spec.RequestedBy = requester(node)
		r.noteWaiting(ctx, node, p, nf)
		made, err := r.create(ctx, node, nf, previous, fmt.Sprintf("manual fence requested by %s: %s", by, reason))
		if err == nil && !made { // a fence of the node is still there (on its way out): the request waits for it to go
			return true, r.sayOnce(ctx, node, v1alpha1.AnnotationFenceRequest, fenceRequestWaiting(p))
		}
		if err != nil || !p.Spec.DryRun {
			return true, err
		}
	}
	return true, r.dropRequest(ctx, node, corev1.EventTypeNormal, ReasonFenceRequestDryRun,
		"fence request %q (requested by %s) recorded as a dry run and removed: policy %s is a dry run, so nothing was fenced (NodeFence %s says what it would do); "+
			"a request is acted on once: request again once the policy fences for real (spec.dryRun: false)",
		reason, by, p.Name, node.Name)
}

// samePolicy says whether the API server's policies give node the policy p (nil: none) that the
// cache gave, dry run or not alike.
func (r *NodeReconciler) samePolicy(ctx context.Context, node *corev1.Node, p *v1alpha1.FencingPolicy) (bool, error) {
	fresh, err := policyFor(ctx, r.reader(), node)
	if err != nil || (fresh == nil) != (p == nil) {
		return false, err
	}
	return p == nil || (fresh.Name == p.Name && fresh.Spec.DryRun == p.Spec.DryRun), nil
}

// detect fences a node whose verdict is failed, unless the storm guard holds.
func (r *NodeReconciler) detect(ctx context.Context, node *corev1.Node, p *v1alpha1.FencingPolicy, previous *v1alpha1.NodeFence) (ctrl.Result, error) {
	now, timeout := r.now(), leaseTimeout(p)
	obs, err := r.Observer.Observe(ctx, node, timeout, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	if obs.Verdict.Failed() && r.WakePolicies != nil {
		r.WakePolicies(p.Name, node.Name)
	}
	if !obs.Verdict.Failed() {
		// Look again the moment the node would turn failed if nothing new arrives; until then,
		// a plain renewal of its Lease changes nothing to act on (lease_events.go).
		r.looks.set(node.Name, true)
		r.said.forget(node.Name)
		return ctrl.Result{RequeueAfter: lookAgain(obs, timeout, now)}, nil
	}
	if res, blind := r.blind(ctx, node, obs); blind {
		return res, nil
	}
	if res, held := r.agentsSilent(ctx, node, obs, now); held {
		return res, nil
	}
	methods := methodsFor(p.Spec.Methods, obs.Verdict)
	if len(methods) == 0 && obs.Verdict == detectors.Dead {
		r.Recorder.Eventf(node, p, corev1.EventTypeWarning, ReasonNoMethod, "Detect",
			"cannot fence node %s (%s): policy %s has no method that works without the node's agent", node.Name, obs.Reason, p.Name)
		return ctrl.Result{RequeueAfter: stormRecheck}, nil
	}
	if len(methods) == 0 {
		return r.aliveNotFencing(ctx, node, obs)
	}
	h, err := policyHealth(ctx, r.Observer, p, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	if h.Blocked() {
		msg := fmt.Sprintf("not fencing node %s (%s): %d of %d nodes of policy %s look failed or late (Suspect), more than the storm guard's %d; the controller may be the one cut off",
			node.Name, obs.Reason, h.Unhealthy, h.Nodes, p.Name, h.MaxUnhealthy)
		r.Recorder.Eventf(node, p, corev1.EventTypeWarning, ReasonStormGuard, "Detect", msg)
		r.repeated(ctx, node.Name, "storm guard holds", "unhealthy", h.Unhealthy, "nodes", h.Nodes, "maxUnhealthy", h.MaxUnhealthy)
		return ctrl.Result{RequeueAfter: stormRecheck}, nil
	}
	wait, err := podsWaiting(ctx, r.reader(), node.Name, p.Spec.Workloads)
	if err != nil {
		return ctrl.Result{}, err
	}
	if p.Spec.Workloads != nil && len(wait.pods) == 0 {
		r.Recorder.Eventf(node, p, corev1.EventTypeNormal, ReasonNoWorkloadToFence, "Detect",
			"not fencing node %s (%s): none of its pods is one policy %s fences for (%s); Kubernetes replaces its pods once the node is NotReady",
			node.Name, obs.Reason, p.Name, p.Spec.Workloads.Describe())
		return ctrl.Result{RequeueAfter: stormRecheck}, nil
	}
	nf := newNodeFence(node, p, v1alpha1.TriggerDetected, fmt.Sprintf("%s: %s", obs.Verdict, obs.Reason))
	nf.Spec.Methods, nf.Spec.Verdict = methods, string(obs.Verdict)
	nf.Spec.Waiting, nf.Spec.Urgency = wait.listed(), wait.urgency
	_, err = r.create(ctx, node, nf, previous, "node failed: "+nf.Spec.Reason)
	return ctrl.Result{}, err
}

// lookAgain is how long until a node judged neither failed nor fenced is looked at again:
// just after its Deadline, the moment it turns failed if nothing new arrives, and when that
// Deadline is its Lease's expiry, timeout/10 later (2 s at the default 20 s), of the timeout
// its Lease was judged with (obs.Timeout, when the detectors raised the policy's timeout).
//
// Why later: a look at the very expiry of renewal R reads R's successor, but rarely the renewal
// due at that same moment (R + 2 intervals when the timeout is two of the kubelet's 10 s
// intervals, as by default). That one arrives a little after: the kubelet waits its interval
// plus up to 4 % jitter after its last renewal ended, and the watch must bring the renewal.
// Such a look moves the Deadline on by one renewal interval rather than by the timeout, so a
// node costs a look per renewal instead of one per timeout. Waiting timeout/10 lets the
// renewal due at the expiry arrive first. The price: a node silent on its Lease alone, with no
// agent to say more, is fenced up to timeout/10 later. The classifier's fast Dead (agent lost,
// no peer reaching the node) is not delayed: its Deadline is not a Lease expiry, and the agent
// loss watch wakes the node the moment its agent is lost.
func lookAgain(obs detectors.Observation, timeout time.Duration, now time.Time) time.Duration {
	after := max(obs.Deadline.Sub(now), 0) + 50*time.Millisecond
	timeout = max(timeout, obs.Timeout)
	if obs.LeaseExpiry {
		after += timeout / 10
	}
	return after
}

// repeated writes a line that every recheck of node repeats: at the default verbosity once every
// repeatEvery, at V(1) in between.
func (r *NodeReconciler) repeated(ctx context.Context, node, msg string, kvs ...any) {
	log := ctrl.LoggerFrom(ctx)
	if !r.said.due(node, msg, r.now()) {
		log = log.V(1)
	}
	log.Info(msg, kvs...)
}

// forgetNode drops a deleted node's agent heartbeats, so that its silence is not counted as an
// agent gone missing (palisade_agents_missing), and its Lease renewals seen (a node of the same
// name registered later is judged from its own Lease).
func (r *NodeReconciler) forgetNode(node string) {
	if f, ok := r.Observer.Heartbeats.(interface{ Forget(node string) }); ok {
		f.Forget(node)
	}
	r.Observer.Renewals.Forget(node)
}

// noteWaiting records on a fence asked for by a person or a deletion which pods wait on it and
// how urgent it is; such a fence is taken whatever the policy's workloads say, and a failure to
// read the pods only leaves the record out.
func (r *NodeReconciler) noteWaiting(ctx context.Context, node *corev1.Node, p *v1alpha1.FencingPolicy, nf *v1alpha1.NodeFence) {
	wait, err := podsWaiting(ctx, r.reader(), node.Name, p.Spec.Workloads)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "reading the pods waiting on the fence; the fence goes ahead without them on record")
		return
	}
	nf.Spec.Waiting, nf.Spec.Urgency = wait.listed(), wait.urgency
}

func (r *NodeReconciler) reader() client.Reader { return apiOr(r.APIReader, r.Client) }

// methodsFor picks the policy's methods that fit the verdict. A node with no signal on any path
// (Dead) cannot be reached through its agent, so its chain skips the methods that need it. A
// node independent signals show alive (Partitioned, KubeletDown) is never powered off blindly
// (invariant 4): only a chain that starts with a method through its agent (the executor) may
// fence it, escalating to power-off when that method fails.
func methodsFor(chain []v1alpha1.Method, v detectors.Verdict) []v1alpha1.Method {
	chain = levelOrder(chain)
	if v == detectors.Dead {
		// A level with such a method goes whole: without it the level would no longer be what
		// the policy requires to be all confirmed.
		skip := map[string]bool{}
		for _, m := range chain {
			if methodKinds[m.Type].needsAgent && m.Level != "" {
				skip[m.Level] = true
			}
		}
		return slices.DeleteFunc(slices.Clone(chain), func(m v1alpha1.Method) bool {
			return methodKinds[m.Type].needsAgent || (m.Level != "" && skip[m.Level])
		})
	}
	if len(chain) > 0 && methodKinds[chain[0].Type].needsAgent {
		return chain
	}
	return nil
}

// aliveNotFencing holds back a node that independent signals show alive (Partitioned,
// KubeletDown) and whose policy does not start with the executor: never a blind power-off
// (invariant 4). Palisade waits and says so; the verdict is looked at again every second.
func (r *NodeReconciler) aliveNotFencing(ctx context.Context, node *corev1.Node, obs detectors.Observation) (ctrl.Result, error) {
	r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonAliveNotFencing, "Detect",
		"not powering off node %s: %s: %s", node.Name, obs.Verdict, obs.Reason)
	r.repeated(ctx, node.Name, "node failed on the API's view but alive on others: not fencing", "verdict", obs.Verdict, "reason", obs.Reason)
	return ctrl.Result{RequeueAfter: aliveRecheck}, nil
}

// create creates the fence and says whether this call made it (false: a NodeFence of the node
// was there already, a fence not yet gone or one another pass made). previous, when set, is
// the node's recovered fence, which it replaces: its recovery time goes into the new one, for
// the flap check.
func (r *NodeReconciler) create(ctx context.Context, node *corev1.Node, nf *v1alpha1.NodeFence, previous *v1alpha1.NodeFence, why string) (made bool, err error) {
	if err := leading(ctx, r.Leader); err != nil { // leading.go: a replica that stood still judged from what it saw before
		return false, fmt.Errorf("not fencing node %s: %w", node.Name, err)
	}
	if previous != nil {
		if rec := previous.Status.Recovery; rec != nil {
			nf.Spec.PreviousRecoveryTime = rec.RecoveredTime
			if nf.Spec.PreviousRecoveryTime == nil {
				nf.Spec.PreviousRecoveryTime = &rec.Time
			}
		}
		uid := previous.UID
		if err := r.Client.Delete(ctx, previous, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting the ended NodeFence of node %s (%s) before fencing it: %w", node.Name, endedAs(previous), err)
		}
		if previous.Spec.DryRun {
			why += "; replaces the dry-run record of policy " + previous.Spec.PolicyName + ", which now fences for real"
		}
	}
	if err := r.Client.Create(ctx, nf); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("creating NodeFence for node %s: %w", node.Name, err)
	}
	fencesCreated.WithLabelValues(string(nf.Spec.Trigger)).Inc()
	ctrl.LoggerFrom(ctx).Info("fence created", "trigger", nf.Spec.Trigger, "reason", nf.Spec.Reason, "policy", nf.Spec.PolicyName)
	r.Recorder.Eventf(node, nf, corev1.EventTypeWarning, ReasonFenceCreated, "Detect", "%s; fencing with %s (policy %s)", why, methodNames(nf), nf.Spec.PolicyName)
	r.Recorder.Eventf(nf, node, corev1.EventTypeNormal, ReasonFenceCreated, "Detect", "%s; fencing with %s (policy %s)", why, methodNames(nf), nf.Spec.PolicyName)
	return true, nil
}

// endedAs names how a NodeFence that a new one replaces ended.
func endedAs(nf *v1alpha1.NodeFence) string {
	if nf.Spec.DryRun {
		return "a dry run's record"
	}
	return string(nf.Status.Phase)
}

func newNodeFence(node *corev1.Node, p *v1alpha1.FencingPolicy, trigger v1alpha1.Trigger, reason string) *v1alpha1.NodeFence {
	labels := map[string]string{}
	// spec.reason holds v1alpha1.MaxReason bytes: a detector's reason names nodes (peers that
	// did not reach it, up to 253 characters each) and is cut rather than the fence refused.
	// A label value holds at most 63 characters, a node name up to 253: a longer name goes
	// without the label rather than the API server refusing the fence.
	if errs := validation.IsValidLabelValue(node.Name); len(errs) == 0 {
		labels[v1alpha1.LabelNode] = node.Name
	}
	return &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: labels},
		Spec: v1alpha1.NodeFenceSpec{
			NodeName: node.Name, PolicyName: p.Name, Trigger: trigger, Reason: shorten(reason, v1alpha1.MaxReason),
			Methods: levelOrder(p.Spec.Methods), Release: p.Spec.Release, Recovery: p.Spec.Recovery, DryRun: p.Spec.DryRun,
		},
	}
}

func (r *NodeReconciler) allNodes(ctx context.Context, _ client.Object) []reconcile.Request {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: n.Name}})
	}
	return reqs
}

func (r *NodeReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func orUnknown(s string) string {
	if s == "" {
		return "an unverified client (install the chart's fence-request admission policies to record who)"
	}
	return s
}
