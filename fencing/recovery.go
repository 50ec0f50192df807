package fencing

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/providers"
)

// Recovery (invariant 5): a node whose fence was released is given back to the cluster only
// when it is back and clean. Back: its Node is Ready again. Clean: it rebooted since the fence
// (its boot ID is another than the one recorded when the fence began and those read at its
// confirmation, boots.go), or an operator confirms
// it clean with the palisade.dev/unfence-request annotation (guarded like fence requests). A
// node that comes back without a reboot stays fenced: the fence may have stopped its kubelet and
// not its processes. A node fenced again soon after its last recovery (the policy's flapWindow)
// is held fenced until an operator confirms it clean.
//
// Unfencing lifts the storage fences (the lift of unfence.go), then removes the out-of-service
// taint and the node's request annotations, and ends the NodeFence as Recovered, recording how. The decision is recorded before the first of these
// writes, so a controller that restarts half-way finishes the same recovery.

const (
	// DefaultFlapWindow is recovery.flapWindow's default.
	DefaultFlapWindow = time.Hour
	// retryPowerOn is how often a failed power-on (recovery.powerOn) is tried again.
	retryPowerOn = 30 * time.Second
	// retryAgentBoot is how often a node held RebootUnconfirmed is judged again at first
	// (heartbeats change no API object that would wake the reconciler), retryAgentBootMax at
	// most: a sixth of the time since the node came back, so that a node held for good costs
	// a Node read a minute.
	retryAgentBoot    = 5 * time.Second
	retryAgentBootMax = time.Minute
	// retryPowerOnRefused is how often a power-on refused for a reason only a person can
	// change (credentials, the machine's identity: providers.IsRetryable) is tried again: a
	// BMC counts failed logins, and many lock the account or the address out after a few.
	retryPowerOnRefused = 10 * time.Minute

	// Recovered=False reasons: why a released node is still fenced.

	// ReasonNodeNotBack: the node is not Ready.
	ReasonNodeNotBack = "NodeNotBack"
	// ReasonNodeGone: the Node no longer exists.
	ReasonNodeGone = "NodeGone"
	// ReasonNodeReplaced: a Node of the same name was registered anew since the fence (another
	// UID), perhaps by another machine; held until confirmed clean.
	ReasonNodeReplaced = "NodeReplaced"
	// ReasonTaintRemoved: the out-of-service taint this fence added was taken off by someone
	// else while the node was held: it is back in service without being found clean.
	ReasonTaintRemoved = "TaintRemoved"
	// ReasonTaintKept (an event): the node was unfenced, but an out-of-service taint this
	// fence did not add (an operator's, another controller's) stays on it.
	ReasonTaintKept = "OutOfServiceTaintKept"
	// ReasonBootIDUnchanged: the node is back with the boot ID it had when it was fenced.
	ReasonBootIDUnchanged = "BootIDUnchanged"
	// ReasonPowerOffDisproved: after a power method confirmed the machine off, the node posted
	// its status with the boot ID it had when fenced: the machine never lost power, and its
	// workload may run beside its replacements.
	ReasonPowerOffDisproved = "PowerOffDisproved"
	// ReasonBootIDUnknown: a boot ID is missing, then or now, so a reboot cannot be proven.
	ReasonBootIDUnknown = "BootIDUnknown"
	// ReasonRebootUnconfirmed: the node's kubelet reports a new boot ID, but its fence kept
	// the machine on and its agent has not heartbeated from that boot (boots.go).
	ReasonRebootUnconfirmed = "RebootUnconfirmed"
	// ReasonFlapping: the node was fenced again within the flap window of its last recovery.
	ReasonFlapping = "Flapping"
	// ReasonAutomaticRecoveryOff: the policy unfences only on an operator's request.
	ReasonAutomaticRecoveryOff = "AutomaticRecoveryOff"
	// ReasonInvalidUnfenceRequest: palisade.dev/unfence-request is malformed; nothing changes.
	ReasonInvalidUnfenceRequest = "InvalidUnfenceRequest"
	// ReasonPowerOnFailed: recovery.powerOn asked to power the machine back on, and that failed.
	ReasonPowerOnFailed = "PowerOnFailed"
	// ReasonPoweredOn (also an event): the machine was powered back on after the release.
	ReasonPoweredOn = "PoweredOn"
	// ReasonRecovering: the node was found clean and is being unfenced.
	ReasonRecovering = "Recovering"

	// ReasonUnfenced (event): the node was unfenced.
	ReasonUnfenced = "Unfenced"
)

// releasedFenceOf maps a Node to its NodeFence when that fence is released and not yet
// recovered: a Node's change (Ready again, a new boot ID, an unfence request) may unfence it.
func (r *NodeFenceReconciler) releasedFenceOf(ctx context.Context, o client.Object) []reconcile.Request {
	nf := &v1alpha1.NodeFence{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: o.GetName()}, nf); err != nil {
		return nil
	}
	if nf.Status.Phase != v1alpha1.PhaseReleased || nf.Spec.NodeName != o.GetName() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: nf.Name}}}
}

// recoverIfClean unfences the node of a released fence when it is back and clean, and
// otherwise says on the NodeFence why it stays fenced.
func (r *NodeFenceReconciler) recoverIfClean(ctx context.Context, nf *v1alpha1.NodeFence) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading node %s: %w", nf.Spec.NodeName, err)
		}
		return ctrl.Result{}, r.hold(ctx, nf, ReasonNodeGone, fmt.Sprintf(
			"node %s no longer exists: nothing to unfence; this NodeFence is the record of its fence", nf.Spec.NodeName))
	}
	if nf.Status.Recovery == nil { // once decided, the request it honoured is its own
		if err := r.dropEarlyRequests(ctx, nf, node); err != nil {
			return ctrl.Result{}, err
		}
	}
	// A machine shown never to have lost power is on: there is nothing to power on, and its
	// PowerOffDisproved must not wait behind a power-on's failure.
	if nf.Status.Recovery == nil && nf.Spec.Recovery.PowerOn && nf.Status.PowerRestoredTime == nil && nf.Status.PowerOffDisprovedTime == nil {
		// A power-on goes by node, before any write of this copy: a lost leader's stale copy
		// would boot the machine of a newer fence of the node.
		if err := r.stillCurrent(ctx, nf); err != nil {
			return ctrl.Result{}, fmt.Errorf("not powering node %s on from a copy of its NodeFence that may be stale: %w", nf.Spec.NodeName, err)
		}
		if err := leading(ctx, r.Leader); err != nil { // leading.go
			return notLeading(ctx, "powering node "+nf.Spec.NodeName+" on", err)
		}
		res, done, err := r.restorePower(ctx, nf)
		if err != nil {
			return res, err
		}
		// A power-on that fails (a BMC gone for good) holds the node only while it is not back
		// and clean some other way: powered on by hand and rebooted, or confirmed clean.
		if !done {
			if rec, _, _ := judgeClean(nf, node, r.agentBoot(node.Name), r.now()); rec == nil {
				return res, nil
			}
		}
	}
	decidedBefore := nf.Status.Recovery != nil
	if nf.Status.Recovery == nil {
		rec, reason, msg := judgeClean(nf, node, r.agentBoot(node.Name), r.now())
		if rec != nil && rec.How != v1alpha1.RecoveryConfirmedClean {
			manual, err := r.manualNow(ctx, nf) // recovery_policy.go
			if err != nil {
				return ctrl.Result{}, err
			}
			if manual {
				rec, reason, msg = nil, ReasonAutomaticRecoveryOff, fmt.Sprintf("node %s is back (%s), but policy %s now unfences only on request (its recovery.automatic was turned off after this fence began): %s",
					nf.Spec.NodeName, rec.Reason, nf.Spec.PolicyName, confirmText(nf.Spec.NodeName))
			}
		}
		if rec == nil {
			var res ctrl.Result
			if reason == ReasonRebootUnconfirmed { // decided before TaintRemoved may wrap it
				res.RequeueAfter = agentBootRetry(node, r.now())
			}
			if reason != ReasonPowerOffDisproved && reason != ReasonNodeReplaced { // those say more: a Node registered anew never had the taint
				reason, msg = taintTakenOff(nf, node, reason, msg)
			}
			return res, r.hold(ctx, nf, reason, msg)
		}
		if err := leading(ctx, r.Leader); err != nil { // leading.go: a decision a new leader would act on
			return notLeading(ctx, "deciding to unfence node "+nf.Spec.NodeName, err)
		}
		nf.Status.Recovery = rec
		setCondition(nf, v1alpha1.ConditionRecovered, metav1.ConditionFalse, ReasonRecovering, "unfencing: "+rec.Reason)
		if err := r.saveStatus(ctx, nf); err != nil {
			return ctrl.Result{}, err
		}
		ctrl.LoggerFrom(ctx).Info("node found clean: unfencing", "how", rec.How, "reason", rec.Reason)
	}
	if decidedBefore { // decided in this pass: checked just before the decision's write
		if err := leading(ctx, r.Leader); err != nil { // leading.go
			return notLeading(ctx, "unfencing node "+nf.Spec.NodeName, err)
		}
	}
	// The storage first: pods that the taint's removal lets in find their storage reachable.
	lifted, wait := r.lift(ctx, nf)
	if wait != nil {
		return ctrl.Result{RequeueAfter: retryLift}, r.hold(ctx, nf, wait.reason, wait.msg)
	}
	if decidedBefore && len(lifted) == 0 {
		// The decision was read, not made here: this copy may be one a lost leader held while
		// the fence went on (recovered, the node fenced again under the same name), and the
		// taint taken off by node would be the newer fence's. A lift checks the same
		// (lift, stillCurrent); with nothing lifted, nothing checked it yet.
		if err := r.stillCurrent(ctx, nf); err != nil {
			return ctrl.Result{}, fmt.Errorf("not unfencing node %s from a copy of its NodeFence that may be stale: %w", nf.Spec.NodeName, err)
		}
	}
	kept, err := r.unTaint(ctx, nf, node)
	if err != nil {
		return ctrl.Result{}, err
	}
	if controllerutil.ContainsFinalizer(nf, v1alpha1.FinalizerLiftStorageFence) {
		if err := r.letGoOfFence(ctx, nf); err != nil {
			return ctrl.Result{}, err
		}
	}
	now := metav1.NewTime(r.now())
	rec := nf.Status.Recovery
	rec.RecoveredTime = &now
	nf.Status.Phase = v1alpha1.PhaseRecovered
	msg := fmt.Sprintf("node %s unfenced (%s: %s)", nf.Spec.NodeName, rec.How, rec.Reason)
	switch _, tainted := taintedSinceConfirmation(nf); {
	case len(kept) > 0:
		msg += "; an out-of-service taint Palisade did not put on stays (see the OutOfServiceTaintKept event)"
	case tainted:
		msg += ": out-of-service taint removed"
	}
	if len(lifted) > 0 {
		msg += "; storage fence lifted: " + strings.Join(lifted, "; ")
	}
	setCondition(nf, v1alpha1.ConditionRecovered, metav1.ConditionTrue, string(rec.How), msg)
	if err := r.saveStatus(ctx, nf); err != nil {
		return ctrl.Result{}, err
	}
	nodesRecovered.WithLabelValues(string(rec.How)).Inc()
	observeRecovered(nf)
	r.event(ctx, nf, corev1.EventTypeNormal, ReasonUnfenced, "%s", msg)
	for _, t := range kept { // said once: the fence is Recovered, and nothing comes here again
		r.event(ctx, nf, corev1.EventTypeWarning, ReasonTaintKept,
			"node %s is unfenced, but keeps an out-of-service taint Palisade did not put on (%s=%s:NoExecute, added %s): it was on the node before this fence's Taint step, or the fence did not taint; it is left to whoever put it there, and pods without a toleration stay off the node until it goes: kubectl taint node %s %s-",
			nf.Spec.NodeName, t.Key, t.Value, taintAddedText(t), nf.Spec.NodeName, v1alpha1.TaintOutOfService)
	}
	return ctrl.Result{}, nil
}

// agentBootRetry is when a node held RebootUnconfirmed is judged again: retryAgentBoot at
// first, a sixth of the time since the node came back (its Ready condition's last transition,
// on the kubelet's clock: a skew only moves the retry within its bounds) later,
// retryAgentBootMax at most. Not the hold's own age: a Recovered condition that stays False
// keeps its transition time through its reasons (NodeNotBack for an hour, then this).
func agentBootRetry(node *corev1.Node, now time.Time) time.Duration {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return min(max(now.Sub(c.LastTransitionTime.Time)/6, retryAgentBoot), retryAgentBootMax)
		}
	}
	return retryAgentBoot
}

// restorePower powers the machine of a released fence back on through the power method that
// fenced it (recovery.powerOn), once: the machine reboots, and the node is unfenced when it is
// back with a new boot ID. A fence confirmed by a method that does not power off has nothing to
// power on. done is false while the power-on is to be tried again (res says when).
func (r *NodeFenceReconciler) restorePower(ctx context.Context, nf *v1alpha1.NodeFence) (res ctrl.Result, done bool, err error) {
	method := poweredOff(nf)
	if method == nil {
		return ctrl.Result{}, true, nil
	}
	p, ok := r.Fencers[method.Type].(providers.PowerRestorer)
	if !ok {
		return ctrl.Result{RequeueAfter: retryPowerOn}, false, r.hold(ctx, nf, ReasonPowerOnFailed,
			fmt.Sprintf("recovery.powerOn: no provider that powers machines on is registered for method %s (type %s)", method.Name, method.Type))
	}
	if err := p.RestorePower(ctx, r.request(nf, *method)); err != nil {
		retry, msg := retryPowerOn, err.Error()
		if !providers.IsRetryable(err) {
			retry = retryPowerOnRefused
		}
		if hint := providers.HintOf(err); hint != "" {
			msg += " (" + hint + ")"
		}
		return ctrl.Result{RequeueAfter: retry}, false, r.hold(ctx, nf, ReasonPowerOnFailed, fmt.Sprintf(
			"recovery.powerOn: powering node %s back on through method %s failed (tried again every %s): %s; "+
				"the node is unfenced anyway once it is back with a new boot ID (powered on by hand) or confirmed clean (annotation %s)",
			nf.Spec.NodeName, method.Name, retry, msg, v1alpha1.AnnotationUnfenceRequest))
	}
	now := metav1.NewTime(r.now())
	nf.Status.PowerRestoredTime = &now
	msg := fmt.Sprintf("node %s powered back on through method %s (recovery.powerOn): it is unfenced once it is back with a new boot ID", nf.Spec.NodeName, method.Name)
	setCondition(nf, v1alpha1.ConditionRecovered, metav1.ConditionFalse, ReasonPoweredOn, msg)
	if err := r.saveStatus(ctx, nf); err != nil {
		return ctrl.Result{}, false, err
	}
	r.event(ctx, nf, corev1.EventTypeNormal, ReasonPoweredOn, "%s", msg)
	return ctrl.Result{}, true, nil
}

// judgeClean decides whether the node of a released fence may be unfenced now: a record of
// how when it may, else the Recovered=False reason and message saying what it waits for.
// agentBoot is the boot ID of the latest heartbeat held from the node's agent, "" for none.
func judgeClean(nf *v1alpha1.NodeFence, node *corev1.Node, agentBoot string, now time.Time) (*v1alpha1.RecoveryRecord, string, string) {
	name, bootID := node.Name, node.Status.NodeInfo.BootID
	confirm := confirmText(name)
	// A malformed request is said at once, not once the node is back: until then it would hide
	// behind NodeNotBack, and its requester would learn of it only when it counted.
	text, present, err := parseUnfenceRequest(node)
	if present && err != nil {
		return nil, ReasonInvalidUnfenceRequest, fmt.Sprintf("%v; the node stays fenced", err)
	}
	if !lease.NodeReady(node) {
		return nil, ReasonNodeNotBack, fmt.Sprintf("node %s is not back (not Ready): it is unfenced once it is Ready again and clean (rebooted since the fence, or confirmed clean)", name)
	}
	if present {
		return &v1alpha1.RecoveryRecord{How: v1alpha1.RecoveryConfirmedClean, Time: metav1.NewTime(now), BootID: bootID,
			RequestedBy: strings.TrimSpace(node.Annotations[v1alpha1.AnnotationUnfenceRequestedBy]), Reason: text}, "", ""
	}
	if posted, ok := powerOffDisproved(nf, node); ok {
		return nil, ReasonPowerOffDisproved, fmt.Sprintf("node %s posted its status at %s with the boot ID it had when fenced (%s), after method %s confirmed its power off (the fence was confirmed at %s): the machine never lost power (the BMC's read-back is wrong, or the power-off hit another machine), and the workload released from it may run beside its replacements. Check it at once and stop it (power it off by hand); then fix the method's target or BMC. It is held fenced; %s",
			name, posted.Format(time.RFC3339), bootID, nf.Status.PowerOffMethod(), nf.Status.FencedTime.Format(time.RFC3339), confirm)
	}
	if registeredAnew(nf, node) {
		return nil, ReasonNodeReplaced, fmt.Sprintf("node %s was deleted and registered anew since it was fenced (UID %s then, %s now): the machine that registered may not be the one fenced, so its boot ID proves no reboot of that one, and the fence's storage fences name the fenced machine's addresses. The new Node carries no out-of-service taint of this fence (pods may run on it); the fence's storage fences stay, and the fence is not over until you confirm the fenced machine off, wiped or clean: kubectl annotate node %s %s='<how it was made clean>'",
			name, fencedUID(nf), node.UID, name, v1alpha1.AnnotationUnfenceRequest)
	}
	if a := nf.Spec.Recovery.Automatic; a != nil && !*a {
		return nil, ReasonAutomaticRecoveryOff, fmt.Sprintf("node %s is back; policy %s unfences only on request: %s", name, nf.Spec.PolicyName, confirm)
	}
	if nf.Status.BootID == "" || bootID == "" {
		return nil, ReasonBootIDUnknown, fmt.Sprintf("node %s is back, but its boot ID was not known when it was fenced or is not reported now, so a reboot cannot be proven: reboot it and make sure its kubelet reports its boot ID, or %s", name, confirm)
	}
	if bootID == nf.Status.BootID {
		return nil, ReasonBootIDUnchanged, fmt.Sprintf("node %s is back but has not rebooted since it was fenced (boot ID %s): the processes of its workload may have outlived the fence. Reboot it, or %s", name, bootID, confirm)
	}
	if bootOfFence(nf, bootID) { // boots.go
		return nil, ReasonBootIDUnchanged, fmt.Sprintf("node %s is back in the boot it was in when its fence was confirmed (boot ID %s; %s when the fence began): it rebooted while the fence was under way, not since the fence acted, so the processes of its workload may have outlived the fence. Reboot it, or %s",
			name, bootID, nf.Status.BootID, confirm)
	}
	if why := rebootUnconfirmed(nf, bootID, agentBoot); why != "" { // boots.go
		return nil, ReasonRebootUnconfirmed, fmt.Sprintf("node %s is back with a new boot ID as its kubelet reports it (%s; %s when fenced), but %s. Its fence kept the machine on (no power-off confirmed, or its power-off disproved), so a reboot is taken as proven only when the node's agent heartbeats from the new boot too, over its own mTLS identity: the kubelet's report alone may come from its stolen credentials. Check that the Palisade agent runs on the node and reaches the controller (its log says why not), or %s",
			name, bootID, nf.Status.BootID, why, confirm)
	}
	if prev, window := nf.Spec.PreviousRecoveryTime, flapWindow(nf); prev != nil && window > 0 && !nf.CreationTimestamp.Before(prev) && nf.CreationTimestamp.Sub(prev.Time) < window {
		return nil, ReasonFlapping, fmt.Sprintf("node %s was fenced again %s after it was last unfenced, within the policy's flap window (%s): it is held fenced although it rebooted. Find out why it keeps failing; %s",
			name, nf.CreationTimestamp.Sub(prev.Time).Round(time.Second), window, confirm)
	}
	return &v1alpha1.RecoveryRecord{How: v1alpha1.RecoveryRebooted, Time: metav1.NewTime(now), BootID: bootID,
		Reason: fmt.Sprintf("rebooted: boot ID %s when fenced, %s now", nf.Status.BootID, bootID)}, "", ""
}

// taintTakenOff turns the reason a node is held (reason, msg) into TaintRemoved when the
// out-of-service taint this fence added is gone: only recovery removes it from a released
// fence's node, so someone else took it off, and the node is back in service although not
// found clean (its storage fences stay). The message keeps what the hold waits for.
func taintTakenOff(nf *v1alpha1.NodeFence, node *corev1.Node, reason, msg string) (string, string) {
	if !fenceTaintGone(nf, node) {
		return reason, msg
	}
	return ReasonTaintRemoved, fmt.Sprintf("the out-of-service taint was taken off node %s by someone other than Palisade while it was held fenced (%s): "+
		"pods may run on it again although it is not found clean, and its storage fences stay in place. If that was not meant, put the taint back: "+
		"kubectl taint node %s %s=%s:NoExecute. To finish the recovery: %s",
		node.Name, reason, node.Name, v1alpha1.TaintOutOfService, v1alpha1.TaintOutOfServiceValue, msg)
}

// fenceTaintGone says whether the fence put the out-of-service taint on after its confirmation
// and the node no longer carries one.
func fenceTaintGone(nf *v1alpha1.NodeFence, node *corev1.Node) bool {
	_, tainted := taintedSinceConfirmation(nf)
	return tainted && !OutOfService(node)
}

// powerOffDisproved says when the node, Ready, posted its status with a boot ID it had when
// fenced (when the fence began, or at a confirmation: bootOfFence), if that was after a power
// method confirmed its machine off (readyPostedAfter): the machine never lost power.
func powerOffDisproved(nf *v1alpha1.NodeFence, node *corev1.Node) (time.Time, bool) {
	boot := node.Status.NodeInfo.BootID
	if !lease.NodeReady(node) || boot == "" || !bootOfFence(nf, boot) || poweredOff(nf) == nil {
		return time.Time{}, false
	}
	return readyPostedAfter(node, nf.Status.FencedTime)
}

// dropEarlyRequests removes the requests the node carries that were made before what they
// speak of. At the first look after the release (no Recovered condition yet): an unfence
// request, made while the fence was under way, before its workload was released, and a fence
// request other than the fence's own, which the fence answered. When the node first shows its
// power-off disproved (recorded as status.powerOffDisprovedTime, with the metric): an unfence
// request made before that, which vouched for a machine believed off; one made since is
// honoured. Both moments are read from the API server's record, not the cache's: a cache
// behind would take a request made after them for one made before.
func (r *NodeFenceReconciler) dropEarlyRequests(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node) error {
	_, unfence := node.Annotations[v1alpha1.AnnotationUnfenceRequest]
	_, unfenceBy := node.Annotations[v1alpha1.AnnotationUnfenceRequestedBy]
	unfence = unfence || unfenceBy
	fenceText, fence := laterFenceRequest(nf, node)
	_, disproved := powerOffDisproved(nf, node)
	first := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered) == nil
	if !(first && (unfence || fence)) && !(disproved && nf.Status.PowerOffDisprovedTime == nil) {
		return nil // the cache's record is never ahead of the API server's: nothing to do
	}
	record := &v1alpha1.NodeFence{}
	if err := r.reader().Get(ctx, client.ObjectKeyFromObject(nf), record); err != nil {
		return fmt.Errorf("reading NodeFence %s before removing requests made before its release: %w", nf.Name, err)
	}
	if record.UID != nf.UID {
		return fmt.Errorf("NodeFence %s is another object now: this copy is stale", nf.Name)
	}
	first = meta.FindStatusCondition(record.Status.Conditions, v1alpha1.ConditionRecovered) == nil
	newlyDisproved := disproved && record.Status.PowerOffDisprovedTime == nil
	if unfence && (first || newlyDisproved) {
		when := "made before this fence was released"
		if !first {
			when = "made before the node showed that its power-off did not happen (PowerOffDisproved)"
		}
		if err := r.dropUnfenceRequest(ctx, nf, node, when, "recovery waits on it"); err != nil {
			return err
		}
	}
	if fence && first {
		if err := r.dropAnsweredFenceRequest(ctx, nf, node, fenceText); err != nil {
			return err
		}
	}
	if !newlyDisproved {
		return nil
	}
	now := metav1.NewTime(r.now())
	nf.Status.PowerOffDisprovedTime = &now
	if err := r.saveStatus(ctx, nf); err != nil {
		return err
	}
	fencesDisproved.WithLabelValues(nf.Status.PowerOffMethod(), signalBootID).Inc()
	return nil
}

// flapWindow is the fence's recovery.flapWindow, or its default.
func flapWindow(nf *v1alpha1.NodeFence) time.Duration {
	if w := nf.Spec.Recovery.FlapWindow; w != nil {
		return w.Duration
	}
	return DefaultFlapWindow
}

// hold says on the NodeFence why its node stays fenced: the Recovered condition and, once per
// change of reason, an event (on the Node too).
func (r *NodeFenceReconciler) hold(ctx context.Context, nf *v1alpha1.NodeFence, reason, msg string) error {
	var was string // the reason held before (setCondition rewrites the condition in place)
	if c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); c != nil {
		if c.Status == metav1.ConditionFalse && c.Reason == reason && c.Message == msg {
			return nil
		}
		was = c.Reason
	}
	setCondition(nf, v1alpha1.ConditionRecovered, metav1.ConditionFalse, reason, msg)
	if err := r.saveStatus(ctx, nf); err != nil {
		return err
	}
	if was != reason {
		typ := corev1.EventTypeWarning
		if reason == ReasonNodeNotBack || reason == ReasonLifting {
			typ = corev1.EventTypeNormal
		}
		r.event(ctx, nf, typ, reason, "%s", msg)
	}
	return nil
}

// unTaint removes the out-of-service taint this fence put on (or one put back by hand while the
// node was held, as the TaintRemoved hold asks) and the node's requests (with their recorded
// requesters), in one write that fails on a concurrent change of the Node. An out-of-service
// taint that is someone else's decision stays, and is returned for the caller to say once the
// recovery is recorded: one the fence's Taint step found on the node (status.taintFound), or
// any when the fence never tainted (release.outOfServiceTaint false). A fence request
// other than this fence's own was made while the node was held (the first look after the
// release removed any made before): it is kept, and said, so that the node is fenced again
// rather than the request lost.
func (r *NodeFenceReconciler) unTaint(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node) (others []corev1.Taint, err error) {
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	changed := false
	_, tainted := taintedSinceConfirmation(nf)
	ours := tainted && !nf.Status.TaintFound
	taints := node.Spec.Taints[:0:0]
	for _, t := range node.Spec.Taints {
		if t.Key == v1alpha1.TaintOutOfService && t.Effect == corev1.TaintEffectNoExecute {
			if ours {
				changed = true
				continue
			}
			others = append(others, t)
		}
		taints = append(taints, t)
	}
	node.Spec.Taints = taints
	requests := []string{v1alpha1.AnnotationUnfenceRequest, v1alpha1.AnnotationUnfenceRequestedBy}
	later, isLater := laterFenceRequest(nf, node)
	if !isLater {
		requests = append(requests, v1alpha1.AnnotationFenceRequest, v1alpha1.AnnotationFenceRequestedBy)
	}
	for _, a := range requests {
		if _, ok := node.Annotations[a]; ok {
			delete(node.Annotations, a)
			changed = true
		}
	}
	if changed {
		if err := r.Client.Patch(ctx, node, patch); err != nil {
			return nil, fmt.Errorf("removing the out-of-service taint and requests of node %s: %w", node.Name, err)
		}
	}
	if isLater {
		r.event(ctx, nf, corev1.EventTypeWarning, ReasonFenceRequestKept,
			"node %s carries a fence request made while it was held fenced (%s=%q, requested by %q): it is kept, so the node is fenced again now that it is given back; remove the annotation if that is not meant",
			node.Name, v1alpha1.AnnotationFenceRequest, truncate(later, 256), requester(node))
	}
	return others, nil
}

// laterFenceRequest is the fence request the node carries when it is a valid one, and not the
// one this fence answers (a manual fence's own request: its text, by its requester; the same
// text by someone else is another request). A malformed request fences nothing (the node
// controller says so) and goes with the others.
func laterFenceRequest(nf *v1alpha1.NodeFence, node *corev1.Node) (string, bool) {
	text, present, err := parseFenceRequest(node)
	if !present || err != nil || nf.Spec.Trigger == v1alpha1.TriggerManual && text == nf.Spec.Reason && requester(node) == nf.Spec.RequestedBy {
		return "", false
	}
	return text, true
}

// dropAnsweredFenceRequest removes, at the first look after the release, the fence request
// (text, laterFenceRequest's) the node carries that is not this fence's own: it was made while
// this fence was under way, and this fence answered it. Left, it would be taken for one made
// while the node was held, and fence the node again the moment it is given back.
func (r *NodeFenceReconciler) dropAnsweredFenceRequest(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, text string) error {
	by := requester(node)
	if err := r.removeRequest(ctx, node, v1alpha1.AnnotationFenceRequest, v1alpha1.AnnotationFenceRequestedBy); err != nil {
		return fmt.Errorf("removing the fence request node %s carried while its fence was under way (recovery waits on it): %w", node.Name, err)
	}
	r.event(ctx, nf, corev1.EventTypeNormal, ReasonFenceRequestAnswered,
		"node %s carried a fence request made while this fence was under way (%s=%q, requested by %q): this fence answered it, so it was removed",
		node.Name, v1alpha1.AnnotationFenceRequest, truncate(text, 256), by)
	return nil
}

// poweredOff is the method that confirmed the machine's power off in the fence's current
// confirmation (NodeFenceStatus.PowerOffMethod: any method of the confirmed level, not only
// status.method, the level's last), so that the machine can only come back with a new boot
// ID; nil when none did.
func poweredOff(nf *v1alpha1.NodeFence) *v1alpha1.Method {
	name := nf.Status.PowerOffMethod()
	for i, m := range nf.Spec.Methods {
		if name != "" && m.Name == name && methodKinds[m.Type].fence == v1alpha1.StepPowerOff {
			return &nf.Spec.Methods[i]
		}
	}
	return nil
}

// registeredAnew says whether node is another Node than the one fenced: deleted and registered
// anew under the name since (another UID than status.nodeUID, recorded at the fence's first
// look). A fence that recorded no UID (no Node at its first look: a self-fence or an Executor
// confirms without one; or a record from before status.nodeUID) still knows that a Node
// created after the NodeFence is not the one it was made for; both times are the API server's.
func registeredAnew(nf *v1alpha1.NodeFence, node *corev1.Node) bool {
	if nf.Status.NodeUID != "" {
		return string(node.UID) != nf.Status.NodeUID
	}
	// Both times are whole seconds: a Node created in the NodeFence's second came after the
	// first look that found none.
	return !node.CreationTimestamp.IsZero() && !node.CreationTimestamp.Before(&nf.CreationTimestamp)
}

// fencedUID is the fenced Node's UID as the messages name it.
func fencedUID(nf *v1alpha1.NodeFence) string {
	if nf.Status.NodeUID == "" {
		return "unknown (no Node at the fence's first look; this one was created after the NodeFence)"
	}
	return nf.Status.NodeUID
}

// taintAddedText says when the taint t was added, as far as it says.
func taintAddedText(t corev1.Taint) string {
	if t.TimeAdded == nil {
		return "at a time it does not record"
	}
	return "at " + t.TimeAdded.UTC().Format(time.RFC3339)
}
