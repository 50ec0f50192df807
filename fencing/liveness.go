package fencing

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/config/agentwire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/classify"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/agent"
)

// The release-time liveness check (invariant 1 against a read-back that lies). A BMC, a cloud
// or a storage system can confirm the fence of the wrong machine: a mistyped or swapped BMC
// address, a recycled instance ID. The node itself cannot lie that way: a Lease renewal, an
// agent heartbeat or a peer reaching it after its fence was confirmed proves that the fence
// did not hit it. VerifyFenced watches those signals for a window after each confirmation;
// every later release step looks once more before it acts. A sign of life fails the method
// (NodeAliveAfterFence), releases nothing more, takes back the out-of-service taint if it was
// added, and the chain escalates.
//
// What it costs: the window, by default one kubelet Lease renewal interval plus a margin (11s
// with the kubelet's defaults) after the renewal the controller saw last, and at least three
// agent heartbeat intervals after the controller last heard the node's agent or a peer reach
// it (watchUntil), between the confirmation and the first release step; a GET of the node's
// Lease per second meanwhile, and no status write for a pass that saw nothing new (quiet.go). What it cannot see: a node cut off from the API server, from the
// controller's agent channel and from its peers shows no signal whether it runs or not; for
// such a node only the provider's read-back stands between a wrong machine and a release.
//
// A method that leaves the node running by design (the Executor) is judged on its workload
// instead: its Lease, heartbeats and peers are no evidence, but its agent reads the container
// runtime back at every heartbeat, and a workload container running again after the
// confirmation — a kubelet the agent did not stop restarts what the executor killed, and
// then two copies of a pet run — fails the method (WorkloadRunningAfterFence) the same way.
// Without an agent channel to the controller there is no such read-back, and the agent's own
// at the confirmation stands. Its window (workloadWatchUntil) is the kubelet's: a kubelet that
// runs restarts a container it finds exited at its next pod sync (about a second), or after its
// crash back-off (10s the first time) when the container exited recently, so the read-back is
// watched that back-off plus a margin. When the agent stopped the kubelet for this order (its
// kubelet stop command succeeded) and its heartbeats have not seen the kubelet healthy since,
// nothing is left to restart the workload: three heartbeat intervals of read-back plus the
// margin then suffice, and a kubelet healthy again brings the whole window back.

const (
	// verifyMargin is added to the renewal interval: a renewal just due is not missed.
	verifyMargin = time.Second
	// verifyRecheck is how often VerifyFenced looks at the signals.
	verifyRecheck = time.Second
	// kubeletRestartBackOff is the kubelet's first crash back-off: the longest a kubelet that
	// comes back waits before it restarts a container that exited (once, recently, before).
	kubeletRestartBackOff = 10 * time.Second
	// kubeletMaxRestartBackOff is the kubelet's longest crash back-off (its MaxContainerBackOff;
	// the KubeletConfiguration's crashLoopBackOff.maxContainerRestartPeriod can only lower it):
	// a kubelet that runs restarts a container it finds exited at most that long after, later
	// the more often the container exited before.
	kubeletMaxRestartBackOff = 5 * time.Minute
)

// Signals a node can show life on.
const (
	signalLease     = "Lease"
	signalHeartbeat = "AgentHeartbeat"
	signalPeer      = "PeerProbe"
	// signalWorkload: for a method that leaves the node running, workload containers read back
	// running again by the node's agent.
	signalWorkload = "WorkloadRunning"
	// signalBootID: after its release, the node of a power fence posted its status with the
	// boot ID it had when fenced (recovery's PowerOffDisproved).
	signalBootID = "SameBootID"
	// signalRecorded: a sign an earlier pass recorded on the step (recordedSign).
	signalRecorded = "Recorded"
)

// lifeSign is a signal from the node after its fence was confirmed.
type lifeSign struct {
	signal, message string
}

// checksLiveness says whether the current level's confirmation is checked against the node's
// signals: every level but one whose methods all leave the node running by design.
func checksLiveness(nf *v1alpha1.NodeFence) bool {
	for i, m := range nf.Spec.Methods {
		if m.Name == nf.Status.Method {
			first, last := levelSpan(nf.Spec.Methods, i)
			for _, lm := range nf.Spec.Methods[first : last+1] {
				if !methodKinds[lm.Type].keepsNodeRunning {
					return true
				}
			}
			return false
		}
	}
	return true
}

// verifyFenced is the VerifyFenced step: it watches the node's own signals (for a method that
// leaves the node running, its workload) for the window after the confirmation and succeeds
// when none came.
func (r *NodeFenceReconciler) verifyFenced(ctx context.Context, nf *v1alpha1.NodeFence) outcome {
	keepsRunning := !checksLiveness(nf)
	if keepsRunning && r.Heartbeats == nil {
		return done("method %s leaves node %s running by design (its workload was stopped, as its own agent confirmed): its signals are no evidence against the fence, and no agent channel reads its workload back",
			nf.Status.Method, nf.Spec.NodeName)
	}
	if nf.Status.Liveness == nil {
		lv, err := r.baseline(ctx, nf)
		if err != nil {
			return pending(retryRelease, ReasonAPIError, "reading the node's Lease: %v", err)
		}
		nf.Status.Liveness = lv
	}
	out, l, stop := r.checkLife(ctx, nf)
	if stop {
		return out
	}
	blindNote := ""
	if !keepsRunning {
		blindNote = r.extendAfterBlindness(nf, l)
	}
	kubelet := "" // for the record of a method that leaves the node running
	if keepsRunning {
		span, stopped := r.kubeletWindow(nf)
		if stopped {
			kubelet = ", with its kubelet stopped (nothing restarts the workload)"
		} else {
			if span == kubeletMaxRestartBackOff {
				kubelet = fmt.Sprintf(", with its kubelet running and not stopped for the order: it may restart a container up to its crash back-off (%s) later, so the window is that long (set the agent's --kubelet-stop-command, the chart's agent.kubeletStopCommand)", kubeletMaxRestartBackOff)
			}
			if full := afterConfirmation(nf).Add(span + verifyMargin); nf.Status.Liveness.WatchUntil.Time.Before(full) {
				// A kubelet healthy again (or no heartbeat to say it is not) may restart the
				// workload: the whole window, whatever the policy's verifyWindow (which is for
				// the look for life: a shorter one would release a workload the kubelet then
				// starts again beside its replacement).
				nf.Status.Liveness.WatchUntil = metav1.NewTime(full)
			}
		}
	}
	until, now := nf.Status.Liveness.WatchUntil.Time, r.now()
	if now.Before(until) {
		if keepsRunning {
			return pending(min(until.Sub(now), verifyRecheck), ReasonWatchingForLife,
				"method %s stopped the workload of node %s, as its agent confirmed at %s%s; watching the agent's read-back of running containers until %s before releasing (the node itself runs by design)",
				nf.Status.Method, nf.Spec.NodeName, fencedAt(nf).Format(time.RFC3339), kubelet, until.Format(time.RFC3339))
		}
		return pending(min(until.Sub(now), verifyRecheck), ReasonWatchingForLife,
			"no sign of life since the fence was confirmed at %s; watching the node's Lease, agent heartbeats and peer probes until %s before releasing%s",
			fencedAt(nf).Format(time.RFC3339), until.Format(time.RFC3339), blindNote)
	}
	if keepsRunning {
		if out, covered := r.readBackCovers(nf, until, now); !covered {
			return out
		}
		return done("no workload container ran again on node %s between the confirmation at %s and %s%s",
			nf.Spec.NodeName, fencedAt(nf).Format(time.RFC3339), until.Format(time.RFC3339), r.lastReadBack(nf))
	}
	return done("no sign of life from node %s %s: no Lease renewal, no agent heartbeat, no peer reached it%s",
		nf.Spec.NodeName, watchedSpan(nf, until), blindNote)
}

// extendAfterBlindness makes the watch window of a stopped node end no sooner than a whole
// window after the controller saw again, when it began to see only after the confirmation:
// while the API server was down no kubelet could renew, so the window's time then showed
// nothing, and a kubelet renews within its back-off (up to 7s) once the API server is back. A
// controller that started (or won leadership) after the confirmation cannot know whether the
// API server was down before, and waits the same. The window is the policy's verifyWindow, or
// one renewal interval of the node's kubelet (its Lease l, as this pass read it) plus the
// renewal margin (defaultWindow). It returns a note for the record whenever the controller began to see after the
// confirmation.
func (r *NodeFenceReconciler) extendAfterBlindness(nf *v1alpha1.NodeFence, l *coordinationv1.Lease) string {
	if r.Sight == nil {
		return ""
	}
	since := r.Sight.Since()
	if !since.After(fencedAt(nf)) {
		return ""
	}
	window := r.defaultWindow(nf.Spec.NodeName, l, r.now())
	if w := nf.Spec.Release.VerifyWindow; w != nil {
		window = w.Duration
	}
	end := since.Add(window)
	if nf.Status.Liveness.WatchUntil.Time.Before(end) {
		nf.Status.Liveness.WatchUntil = metav1.NewTime(end)
	}
	return fmt.Sprintf(" (the controller has seen renewals only since %s, after the confirmation (%s): watched at least until %s)",
		since.UTC().Format(time.RFC3339), r.Sight.Cause(), end.UTC().Format(time.RFC3339))
}

// defaultWindow is the watch window of node when the policy sets no verifyWindow: one renewal
// interval of the node's kubelet (from its Lease l; the default when there is none) plus the
// margin the fast Dead waits (classify.RenewalMarginFor: verifyMargin, 1 s, on a quiet
// cluster; twice the lateness renewals came with lately on a loaded API server), so that the
// next renewal of a kubelet that still renews is never missed, however late renewals come.
func (r *NodeFenceReconciler) defaultWindow(node string, l *coordinationv1.Lease, now time.Time) time.Duration {
	return lease.RenewInterval(l) + max(verifyMargin, classify.RenewalMarginFor(r.Renewals.Lateness(node, now)))
}

// watchedSpan says over which span VerifyFenced watched a stopped node for life: from the
// confirmation to until; or, when a verifyWindow of 0 watched nothing after it, the
// confirmation alone; or, when the default window had already ended at the confirmation (the
// node was silent a whole renewal interval and more before it, as after a power loss noticed
// through a missed renewal), the window that ended then.
func watchedSpan(nf *v1alpha1.NodeFence, until time.Time) string {
	at := fencedAt(nf)
	switch w := nf.Spec.Release.VerifyWindow; {
	case w != nil && w.Duration <= 0:
		return fmt.Sprintf("at the confirmation at %s (verifyWindow 0s: no watch after it)", at.Format(time.RFC3339))
	case !until.After(at):
		return fmt.Sprintf("in its watch window, which had ended at %s, before the confirmation at %s (silent a whole Lease renewal interval and more)",
			until.Format(time.RFC3339), at.Format(time.RFC3339))
	}
	return fmt.Sprintf("between the confirmation at %s and %s", at.Format(time.RFC3339), until.Format(time.RFC3339))
}

// baseline reads the node's Lease when VerifyFenced first looks. Its baseline renewTime is the
// one recorded with the confirmation (noteBoots; the one read now for a confirmation recorded
// without it): later renewTimes are renewals after the fence, however late this first look
// comes. The watch window is the policy's verifyWindow, from now; by default it ends
// one renewal interval of the node's kubelet plus a margin after the controller first saw the
// renewal the Lease carries (watchUntil), and so never misses the next renewal of a kubelet
// that still renews.
func (r *NodeFenceReconciler) baseline(ctx context.Context, nf *v1alpha1.NodeFence) (*v1alpha1.Liveness, error) {
	l, err := r.lease(ctx, nf.Spec.NodeName)
	if err != nil {
		return nil, err
	}
	now := r.now()
	window := r.defaultWindow(nf.Spec.NodeName, l, now)
	lv := &v1alpha1.Liveness{}
	var seen time.Time // when the controller first saw the Lease's renewal; zero: unknown
	if l != nil {
		lv.LeaseRenewTime = l.Spec.RenewTime
		if c := nf.Status.ConfirmedLeaseRenewTime; c != nil {
			lv.LeaseRenewTime = c // a renewal since the confirmation shows as one (signOfLife)
		}
		if l.Spec.RenewTime != nil {
			seen = r.Renewals.Seen(nf.Spec.NodeName, l.Spec.RenewTime.Time, now)
		}
	}
	switch w := nf.Spec.Release.VerifyWindow; {
	case w != nil:
		lv.WatchUntil = metav1.NewTime(now.Add(w.Duration))
	case !checksLiveness(nf):
		lv.WatchUntil = metav1.NewTime(r.workloadWatchUntil(nf, now))
	default:
		lv.WatchUntil = metav1.NewTime(r.watchUntil(nf, now, window, seen))
	}
	return lv, nil
}

// workloadWatchUntil is the end of the default window of a method that leaves the node
// running: the kubelet's window (kubeletWindow) plus verifyMargin after the confirmation, or
// from now when that is later (a new leader watches the whole window itself).
func (r *NodeFenceReconciler) workloadWatchUntil(nf *v1alpha1.NodeFence, now time.Time) time.Time {
	at := afterConfirmation(nf)
	if at.Before(now) {
		at = now
	}
	span, _ := r.kubeletWindow(nf)
	return at.Add(span + verifyMargin)
}

// kubeletWindow is how long after the confirmation the node's kubelet may still restart what
// the executor stopped, from the agent's latest heartbeat:
//   - stopped, when the agent reports that it stopped the kubelet for this fence's order before
//     terminating and the kubelet is not healthy: nothing restarts the workload, and three of
//     the agent's heartbeat intervals of read-back suffice;
//   - the kubelet's longest crash back-off when the heartbeat sees it healthy after the order
//     ended (a kubelet that runs, cut off from the API server, never learns that its pods were
//     deleted, and restarts a container that exited often before only minutes later, after
//     the release). A probe from before (a heartbeat received before the confirmation, or
//     carrying the order still running) says nothing of the kubelet after the agent's stop:
//     the confirmation may come through the API server while the latest heartbeat is older;
//   - its first back-off otherwise (a kubelet that is down and comes back reaches the API
//     server, the Executor's KubeletDown case, and restarts nothing deleted there).
func (r *NodeFenceReconciler) kubeletWindow(nf *v1alpha1.NodeFence) (span time.Duration, stopped bool) {
	if r.Heartbeats == nil {
		return kubeletRestartBackOff, false
	}
	hb, _, ok := r.Heartbeats.Latest(nf.Spec.NodeName)
	order := agent.OrderID(providers.Request{Fence: nf, Method: v1alpha1.Method{Name: nf.Status.Method}})
	switch {
	case !ok:
		return kubeletRestartBackOff, false
	case hb.KubeletHealthy && probedAfter(hb, order, fencedAt(nf)):
		return kubeletMaxRestartBackOff, false
	case hb.KubeletHealthy, hb.Executor == nil:
		return kubeletRestartBackOff, false
	}
	if st := hb.Executor; st.ID != order || st.State != agentwire.ExecutorConfirmed || !st.KubeletStopped {
		return kubeletRestartBackOff, false
	}
	return 3 * r.heartbeatEvery(nf.Spec.NodeName, hb), true
}

// heartbeatEvery is the interval node's agent, its latest heartbeat hb, is waited for by: the
// longer of hb's and the one the controller asks of it (classify.JudgedInterval: an agent
// asked for a longer one is silent that long), DefaultHeartbeatInterval when neither is known.
// Longer is conservative: the release waits, it never comes sooner.
func (r *NodeFenceReconciler) heartbeatEvery(node string, hb agentwire.Heartbeat) time.Duration {
	every := classify.JudgedInterval(node, hb.Interval, r.IntervalFor)
	if every <= 0 {
		every = DefaultHeartbeatInterval
	}
	return every
}

// probedAfter says whether hb's kubelet probe was made after the order ended: its heartbeat
// carries the order confirmed (the agent reads its order's status before it probes), or,
// carrying no status of the order, came at or after the confirmation.
func probedAfter(hb agentwire.Heartbeat, order string, confirmed time.Time) bool {
	if st := hb.Executor; st != nil && st.ID == order {
		return st.State == agentwire.ExecutorConfirmed
	}
	return !hb.Received.Before(confirmed)
}

// watchUntil is the end of the default watch window, window (one renewal interval of the node's
// kubelet plus verifyMargin) long: from now, or, for a method that stops the node, from when the
// controller first saw the Lease's last renewal (seen), when that is earlier.
//
// Why that is enough: a kubelet renews every renewal interval (plus at most 4 % jitter) after
// its last renewal, and seen is no earlier than that renewal, so a kubelet that still renews
// renews before seen + window, and the check after the window's end reads it. A node whose
// last renewal the controller saw long ago (a Lease that expired, a node powered off between
// renewals) is not watched a whole interval more for a renewal that did not come in one. Its
// agent and its peers get their own time, by the same rule (agentsUntil). A renewal the
// controller had not seen (a new leader) is seen "now", so its window is the whole one from
// now; so is it when seen is zero (no Lease, no record of renewals). A method that leaves the
// node running has its own window (workloadWatchUntil): its Lease is no evidence.
func (r *NodeFenceReconciler) watchUntil(nf *v1alpha1.NodeFence, now time.Time, window time.Duration, seen time.Time) time.Time {
	full := now.Add(window)
	if seen.IsZero() {
		return full
	}
	until := seen.Add(window)
	if agents := r.agentsUntil(nf); until.Before(agents) {
		until = agents
	}
	if full.Before(until) {
		return full
	}
	return until
}

// agentsUntil is when the node's agent and peers have been watched long enough: three of the
// agent's heartbeat intervals (the misses that make an agent lost) plus verifyMargin after the
// controller last heard the node's agent or a peer reach the node — the same rule as the Lease's:
// a live node heard then is heard again by then, and a node silent that long before its fence
// is not waited for again after it. Counted from the confirmation when that is earlier or when
// the controller never heard the agent (a new leader, a node without one); verifyMargin after
// the confirmation without an agent channel.
func (r *NodeFenceReconciler) agentsUntil(nf *v1alpha1.NodeFence) time.Time {
	at := afterConfirmation(nf)
	if r.Heartbeats == nil {
		return at.Add(verifyMargin)
	}
	every := DefaultHeartbeatInterval
	hb, about, ok := r.Heartbeats.Latest(nf.Spec.NodeName)
	if !ok {
		return at.Add(3*every + verifyMargin)
	}
	every = r.heartbeatEvery(nf.Spec.NodeName, hb)
	heard := hb.Received
	for _, p := range about {
		if p.Reachable && p.At.After(heard) {
			heard = p.At
		}
	}
	if at.Before(heard) {
		heard = at
	}
	return heard.Add(3*every + verifyMargin)
}

// checkLife looks for a sign of life after the confirmation. stop says the step ends here: the
// method failed (the node lives) or the signals could not be read (retry). It returns the
// node's Lease as it read it (nil when it had none, or read none: a method that leaves the node
// running is checked by its workload).
func (r *NodeFenceReconciler) checkLife(ctx context.Context, nf *v1alpha1.NodeFence) (outcome, *coordinationv1.Lease, bool) {
	// A sign recorded by an earlier pass decides without a look: a failed read must not replace
	// it on the step (a new leader would then not know it).
	sign, fresh := recordedSign(nf), false
	var l *coordinationv1.Lease
	if sign == nil {
		var err error
		if sign, l, err = r.signOfLife(ctx, nf); err != nil {
			return pending(retryRelease, ReasonAPIError, "reading the node's signals before releasing: %v", err), nil, true
		}
		fresh = sign != nil
	}
	if sign == nil {
		return outcome{}, l, false
	}
	if fresh {
		// The sign is recorded before anything follows from it: a controller that dies, or
		// loses its leadership, before it records the method disproved leaves the record
		// saying so, and a new leader — which has not heard the node's agent yet — does not
		// resume the release on a node that lives (recordedSign).
		step := lastStep(nf)
		step.Reason, step.Message = lifeSeenReason(sign), fmt.Sprintf("node %s showed life (%s): releasing nothing more", nf.Spec.NodeName, sign.message)
		if err := r.saveStatus(ctx, nf); err != nil {
			_, _ = r.untaint(ctx, nf) // the safe way whatever the record: the taint goes
			return pending(retryRelease, lifeSeenReason(sign), "node %s showed life (%s), and recording it failed: %v", nf.Spec.NodeName, sign.message, err), l, true
		}
	}
	untainted, err := r.untaint(ctx, nf)
	if err != nil {
		if !fresh { // as first recorded, not nested once more each pass
			return pending(retryRelease, lastStep(nf).Reason, "%s", lastStep(nf).Message), l, true
		}
		return pending(retryRelease, lifeSeenReason(sign), "node %s showed life (%s) and its out-of-service taint must go: %v", nf.Spec.NodeName, sign.message, err), l, true
	}
	// Counted as the method is failed for it, whether this pass saw the sign or an earlier one
	// recorded it (signal "Recorded": the taint's removal failed then, or the leader changed).
	fencesDisproved.WithLabelValues(nf.Status.Method, sign.signal).Inc()
	if sign.signal == signalWorkload {
		msg := fmt.Sprintf("the workload of node %s runs again: %s, after method %s confirmed it stopped at %s; something started it again — on a node whose kubelet runs, the agent must stop the kubelet first (the agent's --kubelet-stop-command, the chart's agent.kubeletStopCommand). Releasing nothing more",
			nf.Spec.NodeName, sign.message, nf.Status.Method, fencedAt(nf).Format(time.RFC3339))
		if untainted {
			msg += "; the out-of-service taint was removed again"
		}
		return failed(v1alpha1.ReasonWorkloadRunningAfterFence, "%s", msg), l, true
	}
	msg := fmt.Sprintf("node %s is alive: %s, after method %s confirmed its fence at %s; the fence hit another machine or the read-back is wrong (check the method's target, e.g. the node's BMC address). Releasing nothing more",
		nf.Spec.NodeName, sign.message, nf.Status.Method, fencedAt(nf).Format(time.RFC3339))
	if untainted {
		msg += "; the out-of-service taint was removed again"
	}
	return failed(v1alpha1.ReasonNodeAliveAfterFence, "%s", msg), l, true
}

// heardEnough holds a release step (stop) while the controller cannot have heard the node's
// agent and peers long enough to know the node is still silent: before its sight's first round
// trip since its start or new leadership (sight.Status.Seen: until then the tracker's Since is
// not this leadership's, whatever cause its blindness gives by then), and, when it began to see
// only after the confirmation (a new leader, a restart, a blind spell), until three of the
// agent's heartbeat intervals plus verifyMargin after that — the agents' signals live in the
// leader's memory, so a sign of life the leader before it heard (and died before recording) is
// heard again by then, if the node still lives: the same warm-up the classifier gives agents
// not heard since it began to listen. The Lease needs no such wait: its renewals are on the API
// server. A later blind spell holds nothing while it lasts (a stale watch may last through an
// etcd overload, and manual fences go on then), only the wait after it.
func (r *NodeFenceReconciler) heardEnough(nf *v1alpha1.NodeFence) (outcome, bool) {
	if r.Sight == nil {
		return outcome{}, false
	}
	if s, ok := r.Sight.(sightView); ok {
		if st := s.Status(); st.Blind && !st.Seen {
			return pending(verifyRecheck, ReasonControllerBlind, "the controller is blind since %s (%s: %s): releasing nothing of node %s until it sees again",
				st.LastLost.UTC().Format(time.RFC3339), st.Cause, st.Message, nf.Spec.NodeName), true
		}
	}
	since := r.Sight.Since()
	if r.Heartbeats == nil || !since.After(fencedAt(nf)) {
		return outcome{}, false
	}
	hb, _, _ := r.Heartbeats.Latest(nf.Spec.NodeName)
	until, now := since.Add(3*r.heartbeatEvery(nf.Spec.NodeName, hb)+verifyMargin), r.now()
	if !now.Before(until) {
		return outcome{}, false
	}
	return pending(min(until.Sub(now), verifyRecheck), ReasonWatchingForLife,
		"the controller has seen only since %s (%s), after the confirmation at %s: listening for node %s's agent and peers until %s before releasing (a sign of life heard before then may not be on record)",
		since.UTC().Format(time.RFC3339), r.Sight.Cause(), fencedAt(nf).Format(time.RFC3339), nf.Spec.NodeName, until.UTC().Format(time.RFC3339)), true
}

// lifeSeenReason is the reason a step waits with when the node showed life and its taint could
// not be removed yet: recorded on the step, the sign outlives this controller (recordedSign).
func lifeSeenReason(sign *lifeSign) string {
	if sign.signal == signalWorkload {
		return ReasonWorkloadSeenRunning
	}
	return ReasonLifeSeen
}

// recordedSign is the sign of life an earlier pass recorded on the fence's last step when the
// taint's removal failed, nil when none: the signal itself may be gone by now (an agent's
// heartbeats live in the leader's memory, and a new leader has not heard the node yet), and a
// release step resumed without it would force-delete the pods of a node that lives.
func recordedSign(nf *v1alpha1.NodeFence) *lifeSign {
	s := lastStep(nf)
	if s.State != v1alpha1.StepStarted {
		return nil
	}
	switch s.Reason {
	case ReasonLifeSeen:
		return &lifeSign{signalRecorded, "recorded by an earlier pass: " + s.Message}
	case ReasonWorkloadSeenRunning:
		return &lifeSign{signalWorkload, "recorded by an earlier pass: " + s.Message}
	}
	return nil
}

// signOfLife is the first signal from the node after its confirmation, nil when there is none,
// and the node's Lease as it read it.
func (r *NodeFenceReconciler) signOfLife(ctx context.Context, nf *v1alpha1.NodeFence) (*lifeSign, *coordinationv1.Lease, error) {
	if !checksLiveness(nf) {
		return r.workloadBack(nf), nil, nil
	}
	at := fencedAt(nf)
	l, err := r.lease(ctx, nf.Spec.NodeName)
	if err != nil {
		return nil, nil, err
	}
	if l != nil && l.Spec.RenewTime != nil {
		var base *metav1.MicroTime
		if nf.Status.Liveness != nil {
			base = nf.Status.Liveness.LeaseRenewTime
		}
		if base == nil || l.Spec.RenewTime.After(base.Time) {
			return &lifeSign{signalLease, fmt.Sprintf("its Lease was renewed (renewTime %s, was %s)",
				l.Spec.RenewTime.Format(time.RFC3339Nano), microOrNone(base))}, l, nil
		}
	}
	if r.Heartbeats == nil {
		return nil, l, nil
	}
	// Only what came after the second the confirmation was recorded in is surely after it (a
	// live agent heartbeats again within the window).
	at = afterConfirmation(nf)
	hb, about, ok := r.Heartbeats.Latest(nf.Spec.NodeName)
	if ok && hb.Received.After(at) {
		return &lifeSign{signalHeartbeat, fmt.Sprintf("its agent heartbeated at %s (boot ID %s)", hb.Received.Format(time.RFC3339Nano), hb.BootID)}, l, nil
	}
	for _, p := range about {
		if p.Reachable && p.At.After(at) {
			return &lifeSign{signalPeer, fmt.Sprintf("peer %s reached it at %s", p.From, p.At.Format(time.RFC3339Nano))}, l, nil
		}
	}
	return nil, l, nil
}

// afterConfirmation is the first instant surely after the confirmation: the record keeps its
// time to the second.
func afterConfirmation(nf *v1alpha1.NodeFence) time.Time {
	return fencedAt(nf).Truncate(time.Second).Add(time.Second)
}

// workloadBack is, for a method that leaves the node running, the node's agent reading back
// workload containers running in a heartbeat after the confirmation; nil when none did.
func (r *NodeFenceReconciler) workloadBack(nf *v1alpha1.NodeFence) *lifeSign {
	if r.Heartbeats == nil {
		return nil
	}
	hb, _, ok := r.Heartbeats.Latest(nf.Spec.NodeName)
	if !ok || !runsAgain(hb, afterConfirmation(nf)) {
		return nil
	}
	return &lifeSign{signalWorkload, fmt.Sprintf("its agent's heartbeat at %s read back %d workload container(s) running",
		hb.Received.Format(time.RFC3339Nano), *hb.RunningContainers)}
}

// runsAgain says whether hb, received after after (the first instant surely after the
// confirmation), read the workload's containers back running: the method is disproved.
func runsAgain(hb agentwire.Heartbeat, after time.Time) bool {
	return hb.Received.After(after) && hb.RunningContainers != nil && *hb.RunningContainers > 0
}

// coversWindow says whether hb read the runtime back with none running and was sent at or after
// until, the window's end, on the server's clock (Heartbeat.Sent; zero when it cannot be placed).
func coversWindow(hb agentwire.Heartbeat, until time.Time) bool {
	return !hb.Sent.IsZero() && !hb.Sent.Before(until) && hb.RunningContainers != nil && *hb.RunningContainers == 0
}

// readBackCovers says whether the agent's read-back of the runtime covers the whole window of a
// method that leaves the node running: a heartbeat sent at or after its end (until, on the
// server's clock: Heartbeat.Sent) that read the runtime back and found none running (one that
// found some fails the method at workloadBack's next look). A window with no read-back since is
// no evidence: the agent fell silent (killed, the node cut off further) or could not read the
// runtime, and a kubelet that runs may have restarted the workload meanwhile. Until three of
// the agent's heartbeat intervals past the end it waits for one (out is pending); then the
// method fails (out, WorkloadUnverified) and the chain's next method fences the node.
func (r *NodeFenceReconciler) readBackCovers(nf *v1alpha1.NodeFence, until, now time.Time) (out outcome, covered bool) {
	hb, _, ok := r.Heartbeats.Latest(nf.Spec.NodeName)
	// None running, read here: workloadBack read the heartbeats a moment before, and one that
	// came since may read the workload back running. Sent, not Received: a heartbeat the
	// network held back past the end (an HTTPS request retransmitted after a partition heals)
	// read the runtime before it, and a container restarted since would be missed.
	if ok && coversWindow(hb, until) {
		return outcome{}, true
	}
	every := DefaultHeartbeatInterval
	if ok {
		every = r.heartbeatEvery(nf.Spec.NodeName, hb)
	}
	latest := "none since the confirmation"
	switch {
	case ok && hb.Received.After(fencedAt(nf)) && hb.RunningContainers == nil:
		latest = fmt.Sprintf("its latest, at %s, carried none", hb.Received.Format(time.RFC3339))
	case ok && !hb.Received.Before(until) && hb.Sent.IsZero():
		latest = fmt.Sprintf("its latest, received at %s, says no time the controller can place it by (the first heard since the controller started, or no send time stated)", hb.Received.Format(time.RFC3339))
	case ok && !hb.Received.Before(until):
		latest = fmt.Sprintf("its latest, received at %s, was sent at %s, before the end: held back in the network", hb.Received.Format(time.RFC3339), hb.Sent.Format(time.RFC3339Nano))
	case ok && hb.Received.After(fencedAt(nf)):
		latest = fmt.Sprintf("its latest at %s", hb.Received.Format(time.RFC3339))
	}
	giveUp := until.Add(3*every + verifyMargin)
	if now.Before(giveUp) {
		return pending(min(giveUp.Sub(now), readBackLook(hb, ok, every, now)), ReasonWatchingForLife,
			"method %s stopped the workload of node %s, as its agent confirmed at %s; its window ended at %s, waiting until %s for the agent's read-back of the runtime from after it (%s)",
			nf.Status.Method, nf.Spec.NodeName, fencedAt(nf).Format(time.RFC3339), until.Format(time.RFC3339), giveUp.Format(time.RFC3339), latest), false
	}
	return failed(v1alpha1.ReasonWorkloadUnverified,
		"method %s stopped the workload of node %s, as its agent confirmed at %s, but no read-back of the runtime came from its agent after the window's end at %s (%s): whether something (a kubelet that runs) started the workload again cannot be known, so nothing is released; the chain's next method fences the node. Check the agent on the node (its log, its heartbeats: palisade_agents_missing)",
		nf.Status.Method, nf.Spec.NodeName, fencedAt(nf).Format(time.RFC3339), until.Format(time.RFC3339), latest), false
}

// readBackSlack is how long after the agent's next heartbeat is due the pass waiting for the
// read-back looks: time for it to arrive and be recorded (heartbeat handling took 166 ms at p99
// while a rack of 40 was released at 5000 nodes).
const readBackSlack = 200 * time.Millisecond

// readBackLook is when the pass waiting for the agent's read-back from after the window's end
// looks again: once, just after the agent's next heartbeat is due (one interval after its latest
// came, hb when ok), so that the phase of the heartbeats does not hold each fence of a rack up to a
// whole verifyRecheck more; verifyRecheck when that moment has passed (no polling while a
// heartbeat is late: passes of open windows go first in the work queue, and frequent ones held
// back a rack's releases), and at most. It changes when the controller looks, not what it requires.
func readBackLook(hb agentwire.Heartbeat, ok bool, every time.Duration, now time.Time) time.Duration {
	if !ok || hb.Received.IsZero() {
		return verifyRecheck
	}
	if due := hb.Received.Add(every + readBackSlack).Sub(now); due > 0 {
		return min(due, verifyRecheck)
	}
	return verifyRecheck
}

// lastReadBack says what the agent's latest heartbeat read back, for the VerifyFenced record.
func (r *NodeFenceReconciler) lastReadBack(nf *v1alpha1.NodeFence) string {
	hb, _, ok := r.Heartbeats.Latest(nf.Spec.NodeName)
	if !ok || hb.RunningContainers == nil {
		return "" // readBackCovers required one
	}
	return fmt.Sprintf(": its agent's latest heartbeat (sent %s) read back none running", hb.Sent.Format(time.RFC3339))
}

// lease reads the node's Lease from the API server (not the cache: the check must not miss a
// renewal a stale cache has not seen); nil when there is none.
func (r *NodeFenceReconciler) lease(ctx context.Context, node string) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: lease.Namespace, Name: node}, l); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return l, nil
}

// untaint removes the out-of-service taint from a node that showed life after this fence added
// it: the taint is a release, and a release needs a fence. It says whether it removed one.
func (r *NodeFenceReconciler) untaint(ctx context.Context, nf *v1alpha1.NodeFence) (bool, error) {
	since, ok := taintedSinceConfirmation(nf)
	if !ok {
		return false, nil
	}
	node := &corev1.Node{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	kept := node.Spec.Taints[:0]
	for _, t := range node.Spec.Taints {
		if t.Key != v1alpha1.TaintOutOfService || t.Effect != corev1.TaintEffectNoExecute || !addedBy(t, since) {
			kept = append(kept, t)
		}
	}
	if len(kept) == len(node.Spec.Taints) {
		return false, nil
	}
	node.Spec.Taints = kept
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return false, fmt.Errorf("removing the out-of-service taint: %w", err)
	}
	return true, nil
}

// taintedSinceConfirmation says whether this fence began a Taint step after its current
// confirmation, and when the first such step began. The step's state does not matter: a step
// recorded as started may have put the taint on and lost the write of its success (a
// controller killed, a refused status write), and a retried step finds the taint its first try
// put on; addedBy tells the fence's own taint from one that was there before.
func taintedSinceConfirmation(nf *v1alpha1.NodeFence) (time.Time, bool) {
	var first time.Time
	found := false
	for i := len(nf.Status.Steps) - 1; i >= 0; i-- {
		s := nf.Status.Steps[i]
		if isConfirmStep(s.Name) {
			break
		}
		if s.Name == v1alpha1.StepTaint {
			first, found = s.StartTime.Time, true
		}
	}
	return first, found
}

// addedBy says whether the out-of-service taint t is the one a Taint step begun at start added:
// the step stamps its taint's timeAdded with that start, whichever leader runs it, so a taint
// without one, or stamped before the step began, was there already (an operator's, or another
// controller's) and stays when the node shows life. The step succeeds on a taint already
// present, so its success alone does not say whose the taint is. Both times are kept to the
// second; the same second counts as the step's (a retry after a crash finds its own taint).
func addedBy(t corev1.Taint, start time.Time) bool {
	return t.TimeAdded != nil && !t.TimeAdded.Time.Before(start.Truncate(time.Second))
}

// fencedAt is when the current confirmation was recorded (zero if none).
func fencedAt(nf *v1alpha1.NodeFence) time.Time {
	if nf.Status.FencedTime == nil {
		return time.Time{}
	}
	return nf.Status.FencedTime.Time
}

func microOrNone(t *metav1.MicroTime) string {
	if t == nil {
		return "none at the confirmation"
	}
	return t.Format(time.RFC3339Nano)
}
