package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"palisade.dev/palisade/attach"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/providers"
)

// maxStepsPerReconcile bounds how many steps one reconcile may take back to back.
const maxStepsPerReconcile = 16

// NodeFenceReconciler walks a NodeFence through its steps.
type NodeFenceReconciler struct {
	// Client reads NodeFences and Nodes (cached) and writes.
	Client client.Client
	// APIReader reads pods, Nodes and VolumeAttachments straight from the API server.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Fencers holds one provider per method type (wired in cmd/); a method whose type has
	// none fails with ReasonNoProvider.
	Fencers map[v1alpha1.MethodType]providers.Fencer
	// Heartbeats, when set, are the node agents' heartbeats and peer reports: a heartbeat or a
	// peer reaching the node after its fence was confirmed is a sign of life (liveness.go).
	Heartbeats observe.Heartbeats
	// IntervalFor, when set, is the heartbeat interval the controller asks of each node's agent
	// (the observer's): a heard agent is waited for by the longer of it and its heartbeat's
	// (liveness.go, heartbeatEvery).
	IntervalFor func(node string) time.Duration
	// Renewals are when the controller first saw each node's Lease renewals (the node
	// reconciler's); the verify window ends one renewal interval after the last one
	// (liveness.go). Nil: the whole window from the confirmation.
	Renewals *lease.Renewals
	// Sight, when set, says since when the controller has seen without a gap (the observer's
	// sight tracker): a verify window that the controller could not watch in part — the API
	// server down, so that no kubelet could renew, or this controller's own start after the
	// confirmation — ends no sooner than a whole window after it saw again (liveness.go).
	Sight observe.Sight
	// Attachments releases a node's VolumeAttachments.
	Attachments *attach.Releaser
	// Tokens hands out the fencing tokens recorded on each fence before its first step; no
	// step is taken without one.
	Tokens TokenSource
	// Leader, when set, says whether this replica still holds the leader-election Lease; no
	// fence, release, power-on or unfence step acts when it does not (leading.go). Nil: no
	// leader election.
	Leader LeaderCheck
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// ReadBacks, when set, wakes a fence whose verify window waits on its node's agent as soon as
	// a heartbeat decides it (readback.go); its Heard must be the agent server's OnHeartbeat.
	ReadBacks *ReadBacks
	// Concurrency is how many NodeFences advance at once (0: DefaultConcurrency). One fence
	// never runs in two workers: the work queue hands a key to one worker at a time.
	Concurrency int

	// memory keeps, per fence, this controller's last write of it (ownwrites.go) and the
	// passes of a verify window not written to the record (quiet.go): memory.go.
	memory fenceMemory
}

// DefaultConcurrency is how many NodeFences advance at once by default: a rack lost at once
// (40 nodes) is released in a few rounds instead of one fence after another.
const DefaultConcurrency = 10

// workers is a controller's number of workers: n, or DefaultConcurrency when n is 0.
func workers(n int) int {
	if n <= 0 {
		return DefaultConcurrency
	}
	return n
}

// outcome is what taking a step produced.
type outcome struct {
	state   v1alpha1.StepState // Started: not done yet, take it again after retry
	reason  string
	message string
	retry   time.Duration
	// abort: a write the step needed before acting was refused; the pass ends with it, and
	// the step is taken again from a fresh read (nothing of it was done).
	abort error
	// bootID, on a confirmation, is the boot ID the provider's read-back saw the machine in
	// (providers.Status.BootID: the executor's answer), "" for none.
	bootID string
}

func done(format string, args ...any) outcome {
	return outcome{state: v1alpha1.StepSucceeded, message: stepMessage(format, args...)}
}

func failed(reason, format string, args ...any) outcome {
	return outcome{state: v1alpha1.StepFailed, reason: reason, message: stepMessage(format, args...)}
}

func pending(retry time.Duration, reason, format string, args ...any) outcome {
	return outcome{state: v1alpha1.StepStarted, reason: reason, retry: retry, message: stepMessage(format, args...)}
}

// maxStepMessage bounds a step's message: it carries a provider's or a BMC's words, which may
// be a page long, and goes on into the Fenced condition (32768 at most, or the API server
// refuses the whole status write, and the fence stays where it was) and into Events.
const maxStepMessage = 16 << 10

func stepMessage(format string, args ...any) string {
	return shorten(fmt.Sprintf(format, args...), maxStepMessage)
}

// SetupWithManager registers the reconciler.
func (r *NodeFenceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	// Our own status writes must not wake us with a stale cached copy: the reconciler requeues
	// itself while a step is pending.
	b := ctrl.NewControllerManagedBy(mgr).Named("nodefence").
		// Fences go through the work queue by priority: open verify windows, then urgency (workloads.go).
		Watches(&v1alpha1.NodeFence{}, byPriority(), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A released fence's node coming back (Ready, a new boot ID, an unfence request) may
		// unfence it (recovery.go).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.releasedFenceOf)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers(r.Concurrency)})
	if r.ReadBacks != nil {
		// A heartbeat that decides a verify window wakes its fence (readback.go).
		b = b.WatchesRawSource(r.ReadBacks.source())
	}
	return b.Complete(r)
}

// Reconcile takes the fence's next steps until one blocks.
func (r *NodeFenceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	nf := &v1alpha1.NodeFence{}
	if err := r.Client.Get(ctx, req.NamespacedName, nf); err != nil {
		if apierrors.IsNotFound(err) {
			r.endDeleted(ctx, req.Name)
			fenceStates.forget(req.Name)
			r.memory.forget(req.Name)
			r.ReadBacks.done(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if err := r.latest(ctx, nf); err != nil { // never a record older than this controller's own last write
		if apierrors.IsNotFound(err) { // deleted since: its deletion's event comes, look then
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	defer fenceStates.observe(nf) // where it stands once this reconcile is done
	began := time.Now()
	res, err := r.reconcileFence(ctx, nf)
	for range 3 { // bounded: each round needs another write of the record in between
		if !errors.Is(err, errCopyReplaced) {
			break
		}
		res, err = r.reconcileFence(ctx, nf)
	}
	if errors.Is(err, errCopyReplaced) {
		res, err = ctrl.Result{RequeueAfter: time.Second}, nil
	}
	// Taken again by priority too (byPriority): a fence whose pods' budgets are at their limit is
	// not kept waiting behind others' requeues, nor a verify pass behind others' releases.
	res.Priority = ptr.To(queuePriority(nf))
	logPass(ctx, nf, began, res, err)
	return res, err
}

// logPass says at V(1) what a pass of the fence did and how long it took: where a fence's time
// goes when many are under way at once (a rack), pass by pass.
func logPass(ctx context.Context, nf *v1alpha1.NodeFence, began time.Time, res ctrl.Result, err error) {
	log := ctrl.LoggerFrom(ctx).V(1)
	if !log.Enabled() {
		return
	}
	kv := []any{"Node", klog.KRef("", nf.Spec.NodeName), "phase", nf.Status.Phase, "took", time.Since(began).Round(time.Millisecond),
		"requeueAfter", res.RequeueAfter}
	if len(nf.Status.Steps) > 0 {
		s := lastStep(nf)
		kv = append(kv, "step", s.Name, "state", s.State, "reason", s.Reason, "attempts", s.Attempts)
	}
	if err != nil {
		kv = append(kv, "error", err.Error())
	}
	log.Info("fence pass", kv...)
}

// reconcileFence takes the fence's next steps, finishes its deletion, or recovers its node.
func (r *NodeFenceReconciler) reconcileFence(ctx context.Context, nf *v1alpha1.NodeFence) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("Node", klog.KRef("", nf.Spec.NodeName))
	ctx = ctrl.LoggerInto(ctx, log)
	if !nf.DeletionTimestamp.IsZero() {
		return r.finishDeletion(ctx, nf)
	}
	if nf.Spec.DryRun {
		return ctrl.Result{}, r.recordDryRun(ctx, nf)
	}
	switch nf.Status.Phase {
	case v1alpha1.PhaseReleased:
		return r.recoverIfClean(ctx, nf) // recovery.go
	case v1alpha1.PhaseRecovered:
		return ctrl.Result{}, nil
	}
	if msg := noChain(nf); msg != "" && nf.Status.Phase != v1alpha1.PhaseFailed {
		if err := r.dropRequestsAnswered(ctx, nf); err != nil { // answers.go
			return ctrl.Result{}, err
		}
		recordFailure(nf, ReasonNoMethod, msg)
		return ctrl.Result{}, r.saveEnd(ctx, nf, corev1.EventTypeWarning, ReasonFenceFailed, msg)
	}
	for range maxStepsPerReconcile {
		res, more, err := r.advance(ctx, nf)
		if err != nil || !more {
			return res, err
		}
	}
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// advance performs the planner's next action; more says whether to go on at once.
func (r *NodeFenceReconciler) advance(ctx context.Context, nf *v1alpha1.NodeFence) (ctrl.Result, bool, error) {
	a := plan(nf)
	switch a.kind {
	case actNone:
		return ctrl.Result{}, false, nil
	case actFinish:
		recordFinish(nf, r.now())
		if err := r.saveStatus(ctx, nf); err != nil {
			return ctrl.Result{}, false, err
		}
		return r.released(ctx, nf), false, nil
	case actFail:
		if err := r.dropRequestsAnswered(ctx, nf); err != nil { // answers.go
			return ctrl.Result{}, false, err
		}
		last := lastStep(nf)
		recordFailure(nf, last.Reason, fmt.Sprintf("every fencing method failed; last: %s: %s", last.Method, last.Message))
		return ctrl.Result{}, false, r.saveEnd(ctx, nf, corev1.EventTypeWarning, ReasonFenceFailed,
			fmt.Sprintf("fencing node %s failed (%s): %s", nf.Spec.NodeName, releasedBeforeFailure(nf), last.Message))
	case actStart:
		if nf.Status.Token == 0 {
			if err := r.drawToken(ctx, nf); err != nil {
				return ctrl.Result{}, false, err
			}
		}
		if len(nf.Status.Steps) == 0 {
			boot, uid, err := r.firstLook(ctx, nf)
			if err != nil {
				return ctrl.Result{}, false, err
			}
			nf.Status.BootID, nf.Status.NodeUID = boot, uid
			nf.Status.AgentBootID = r.agentBoot(nf.Spec.NodeName) // boots.go
		}
		recordStart(nf, a, r.now())
		if err := r.saveStatus(ctx, nf); err != nil {
			return ctrl.Result{}, false, err
		}
		r.memory.began(nf)
	}
	return r.takeAndRecord(ctx, nf, a)
}

// released counts and says a fence whose Released record was just saved, once.
func (r *NodeFenceReconciler) released(ctx context.Context, nf *v1alpha1.NodeFence) ctrl.Result {
	r.saidEnd(ctx, nf, corev1.EventTypeNormal, ReasonReleased,
		fmt.Sprintf("node %s released: %s deleted, %s released", nf.Spec.NodeName,
			countOf(int(nf.Status.PodsDeleted), "pod"), countOf(int(nf.Status.AttachmentsReleased), "attachment")))
	observeReleased(nf)
	// Recovery is judged at once, not at the Node's next change (a powered-off node may not
	// change again): recovery.powerOn powers it on now, and Recovered says what it waits for.
	return ctrl.Result{RequeueAfter: time.Millisecond}
}

// drawToken gives the fence its fencing token, saved with the step about to start (before it is
// taken). Without one, nothing is taken: the fence says why and the reconcile is retried.
func (r *NodeFenceReconciler) drawToken(ctx context.Context, nf *v1alpha1.NodeFence) error {
	err := fmt.Errorf("no fencing-token source configured")
	var tok int64
	if r.Tokens != nil {
		tok, err = r.Tokens.Next(ctx)
	}
	if err != nil {
		msg := fmt.Sprintf("no step is taken without a fencing token: %v", err)
		r.event(ctx, nf, corev1.EventTypeWarning, ReasonTokenUnavailable, "%s", msg)
		setCondition(nf, v1alpha1.ConditionFenced, metav1.ConditionFalse, ReasonTokenUnavailable, msg)
		_ = r.saveStatus(ctx, nf) // the error returned says it already
		return fmt.Errorf("fence of node %s: %w", nf.Spec.NodeName, err)
	}
	nf.Status.Token = tok
	return nil
}

// takeAndRecord takes the last recorded step and records its outcome.
func (r *NodeFenceReconciler) takeAndRecord(ctx context.Context, nf *v1alpha1.NodeFence, a action) (ctrl.Result, bool, error) {
	s := lastStep(nf)
	resumed := (releaseStep(s.Name) || isFenceStep(s.Name)) && !r.memory.begunHere(nf)
	var before *v1alpha1.NodeFenceStatus // for a pass that may be quiet (quiet.go): the record as read
	if a.step == v1alpha1.StepVerifyFenced || releaseStep(s.Name) && !resumed {
		before = nf.Status.DeepCopy()
	}
	if resumed {
		// A release or fence step this controller did not begin, resumed from a copy it did
		// not write (a new leader's cache, behind the old leader's last writes): the step acts
		// before its end's write would be refused, and the record may since say the node
		// showed life, or be released and the machine powered on again (a power-off resumed
		// from it would stop a running machine).
		if res, current, err := r.resumable(ctx, nf); !current {
			return res, false, err
		}
		if releaseStep(s.Name) && s.Attempts == 0 {
			// Begun by another controller (or before a restart) and never recorded as taken:
			// it may have acted and died before recording so. Counted as one attempt, so that
			// a sign of life found now does not read as found before the step did anything
			// (untaintedAfterRelease keeps the storage fence).
			s.Attempts++
		}
	}
	if actsOnTheWorld(s.Name) {
		if err := leading(ctx, r.Leader); err != nil { // leading.go: nothing taken
			res, err := notLeading(ctx, fmt.Sprintf("step %s of node %s", s.Name, nf.Spec.NodeName), err)
			return res, false, err
		}
	}
	lastStep(nf).Attempts++
	out := r.take(ctx, nf, a)
	if out.abort != nil {
		return ctrl.Result{}, false, out.abort
	}
	step := lastStep(nf)
	if out.state == v1alpha1.StepStarted {
		step.Reason, step.Message = out.reason, out.message
		if before != nil && onlyCounted(before, &nf.Status) {
			n := r.memory.addPasses(nf, 1) // nothing new to record (quiet.go)
			if a.step != v1alpha1.StepVerifyFenced && (step.Attempts-1+n)%10 == 0 {
				r.event(ctx, nf, corev1.EventTypeNormal, ReasonStepRetrying, "%s: %s", step.Name, out.message)
			}
			return ctrl.Result{RequeueAfter: out.retry}, false, nil
		}
		if step.Attempts == 1 || step.Attempts%10 == 0 {
			r.event(ctx, nf, corev1.EventTypeNormal, ReasonStepRetrying, "%s: %s", step.Name, out.message)
		}
		if err := r.saveCounted(ctx, nf, nil); err != nil {
			return ctrl.Result{}, false, err
		}
		if releaseStep(step.Name) || isFenceStep(step.Name) {
			r.memory.began(nf) // this write of the step is this controller's: no need to check again
		}
		return ctrl.Result{RequeueAfter: out.retry}, false, nil
	}
	step.Reason = out.reason
	if out.state == v1alpha1.StepFailed && disproving(out.reason) {
		step.Method = nf.Status.Method // the method the node's signs of life disproved
	}
	recordEnd(nf, out.state, out.message, r.now())
	taken := len(nf.Status.Steps) - 1
	next := followOn(nf)
	// The event only once the step's end is recorded: a step whose record is refused (the
	// Executor's order, written on the NodeFence, makes this copy stale) is taken again, and
	// said once.
	if err := r.saveCounted(ctx, nf, func() { r.recordFollowOn(nf, next) }); err != nil {
		return ctrl.Result{}, false, err
	}
	if next.kind == actStart {
		r.memory.began(nf)
	}
	ended := nf.Status.Steps[taken]
	r.eventForEnd(ctx, nf, &ended)
	if next.kind == actFinish {
		return r.released(ctx, nf), false, nil
	}
	if ended.State == v1alpha1.StepFailed && (isFenceStep(ended.Name) || disproved(ended)) {
		r.endMethod(ctx, nf, ended.Method) // the chain escalates or the fence fails
	}
	return ctrl.Result{}, true, nil
}

// followOn is what is recorded in the same write as a step's end: after a success, the next
// step's start (taken next as the record's last Started step, actResume) or the fence's release;
// nothing after a failure (the chain's escalation is decided apart, endMethod) nor before
// VerifyFenced (the record says Fenced on its own first: the phase people watch for). One
// write instead of two, and the next step is still recorded before it is taken.
func followOn(nf *v1alpha1.NodeFence) action {
	if lastStep(nf).State != v1alpha1.StepSucceeded {
		return action{kind: actNone}
	}
	switch next := plan(nf); {
	case next.kind == actFinish, next.kind == actStart && next.step != v1alpha1.StepVerifyFenced && nf.Status.Token != 0:
		return next
	}
	return action{kind: actNone}
}

// recordFollowOn records next (followOn's answer) in the record about to be written.
func (r *NodeFenceReconciler) recordFollowOn(nf *v1alpha1.NodeFence, next action) {
	switch next.kind {
	case actStart:
		recordStart(nf, next, r.now())
	case actFinish:
		recordFinish(nf, r.now())
	}
}

func (r *NodeFenceReconciler) eventForEnd(ctx context.Context, nf *v1alpha1.NodeFence, s *v1alpha1.Step) {
	switch {
	case disproved(*s):
		r.event(ctx, nf, corev1.EventTypeWarning, s.Reason, "%s", s.Message)
	case s.State == v1alpha1.StepFailed:
		r.event(ctx, nf, corev1.EventTypeWarning, ReasonMethodFailed, "method %s failed at %s (%s): %s", s.Method, s.Name, s.Reason, s.Message)
	case isConfirmStep(s.Name):
		r.event(ctx, nf, corev1.EventTypeNormal, ReasonFenceConfirmed, "node %s fenced by %s: %s", nf.Spec.NodeName, s.Method, s.Message)
	default:
		r.event(ctx, nf, corev1.EventTypeNormal, ReasonStepSucceeded, "%s: %s", s.Name, s.Message)
	}
}

// take dispatches one step. Release steps refuse to act without a confirmed fence.
func (r *NodeFenceReconciler) take(ctx context.Context, nf *v1alpha1.NodeFence, a action) outcome {
	if isFenceStep(a.step) {
		return r.takeMethod(ctx, nf, a)
	}
	if !Confirmed(nf) {
		return failed(ReasonNotConfirmed, "refusing to %s: the record holds no confirmed fence", a.step)
	}
	if a.step == v1alpha1.StepVerifyFenced {
		out := r.verifyFenced(ctx, nf)
		r.awaitReadBack(nf, out) // readback.go
		return out
	}
	if out, _, stop := r.checkLife(ctx, nf); stop {
		return out
	}
	if out, stop := r.heardEnough(nf); stop { // after checkLife: its hold must not replace a recorded sign
		return out
	}
	if out, stop := r.sameNode(ctx, nf); stop {
		return out
	}
	switch a.step {
	case v1alpha1.StepTaint:
		return r.taint(ctx, nf)
	case v1alpha1.StepDeletePods:
		return r.deletePods(ctx, nf)
	case v1alpha1.StepDetachVolumes:
		return r.detachVolumes(ctx, nf)
	case v1alpha1.StepReleaseAttachments:
		return r.releaseAttachments(ctx, nf)
	}
	return failed(ReasonUnknownStep, "unknown step %q", a.step)
}

// sameNode holds a release step while the Node under the fence's name is another one than the
// one fenced: deleted and registered anew (another UID than the one recorded at the fence's
// first look) before the release ended. The confirmation covers the fenced machine; pods bound
// to the name now run on the machine that registered, and force-deleting them would let their
// replacements start beside them. A Node gone holds nothing: the release goes on without it.
func (r *NodeFenceReconciler) sameNode(ctx context.Context, nf *v1alpha1.NodeFence) (outcome, bool) {
	node := &corev1.Node{}
	if err := r.reader().Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return outcome{}, false
		}
		return pending(retryRelease, ReasonAPIError, "reading node %s: %v", nf.Spec.NodeName, err), true
	}
	if !registeredAnew(nf, node) {
		return outcome{}, false
	}
	return nodeReplaced(nf, node), true
}

// nodeReplaced holds a release step of a fence whose node was registered anew (registeredAnew).
func nodeReplaced(nf *v1alpha1.NodeFence, node *corev1.Node) outcome {
	return pending(retryStuck, ReasonNodeReplaced,
		"node %s was deleted and registered anew (UID %s, the fenced one's %s) before the release ended: pods bound to the name run on the machine that registered, so nothing more is released; make sure which machine that is, then drain it by hand or delete this NodeFence (its storage fences stay)",
		nf.Spec.NodeName, node.UID, fencedUID(nf))
}

func (r *NodeFenceReconciler) recordDryRun(ctx context.Context, nf *v1alpha1.NodeFence) error {
	if nf.Status.Phase == v1alpha1.PhasePending {
		return nil
	}
	nf.Status.Phase = v1alpha1.PhasePending
	setCondition(nf, v1alpha1.ConditionFenced, metav1.ConditionFalse, v1alpha1.ReasonDryRun,
		fmt.Sprintf("dry run: would fence with %s and release as the policy says; no step taken", methodNames(nf)))
	r.event(ctx, nf, corev1.EventTypeNormal, ReasonDryRun, "dry run: would fence node %s with %s", nf.Spec.NodeName, methodNames(nf))
	return r.saveStatus(ctx, nf)
}

// saveStatus persists the record. On a conflict the error makes the reconcile start over
// from a fresh read: every step is idempotent.
func (r *NodeFenceReconciler) saveStatus(ctx context.Context, nf *v1alpha1.NodeFence) error {
	nf.Status.ObservedGeneration = nf.Generation
	if err := r.Client.Status().Update(ctx, nf); err != nil {
		return fmt.Errorf("recording fence of node %s: %w", nf.Spec.NodeName, err)
	}
	r.memory.wrote(nf)
	return nil
}

// saveCounted persists the record after a pass of its last step, with the step's unwritten
// passes (quiet.go) counted in its attempts, and with what then adds to the record (nil:
// nothing); a refused write keeps the passes, and this pass, for the next (the step is taken
// again from a fresh read).
func (r *NodeFenceReconciler) saveCounted(ctx context.Context, nf *v1alpha1.NodeFence, then func()) error {
	n := r.memory.takePasses(nf)
	lastStep(nf).Attempts += n
	if then != nil {
		then()
	}
	if err := r.saveStatus(ctx, nf); err != nil {
		r.memory.addPasses(nf, n+1)
		return err
	}
	return nil
}

// saveEnd persists a fence's end, then counts it and says so, once.
func (r *NodeFenceReconciler) saveEnd(ctx context.Context, nf *v1alpha1.NodeFence, typ, reason, msg string) error {
	if err := r.saveStatus(ctx, nf); err != nil {
		return err
	}
	r.saidEnd(ctx, nf, typ, reason, msg)
	return nil
}

// saidEnd counts a fence whose end was just saved and says so.
func (r *NodeFenceReconciler) saidEnd(ctx context.Context, nf *v1alpha1.NodeFence, typ, reason, msg string) {
	fencesEnded.WithLabelValues(string(nf.Status.Phase)).Inc()
	r.endMethods(ctx, nf)
	r.event(ctx, nf, typ, reason, "%s", msg)
}

// event records an event on the NodeFence and, for the milestones, on its Node too.
func (r *NodeFenceReconciler) event(ctx context.Context, nf *v1alpha1.NodeFence, typ, reason, format string, args ...any) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(nf, nil, typ, reason, "Fence", format, args...)
	switch reason {
	case ReasonFenceConfirmed, ReasonFenceFailed, ReasonReleased, ReasonNodeAliveAfterFence, ReasonWorkloadRunningAfterFence, ReasonWorkloadUnverified,
		ReasonUnfenced, ReasonBootIDUnchanged, ReasonPowerOffDisproved, ReasonBootIDUnknown, ReasonRebootUnconfirmed, ReasonFlapping, ReasonAutomaticRecoveryOff, ReasonInvalidUnfenceRequest,
		ReasonPoweredOn, ReasonPowerOnFailed, ReasonTaintRemoved, ReasonTaintKept, ReasonStaleUnfenceRequest, ReasonFenceRequestAnswered, ReasonFenceRequestKept:
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node); err == nil {
			r.Recorder.Eventf(node, nf, typ, reason, "Fence", format, args...)
		}
	}
}

// firstLook reads the node before the fence's first step: its boot ID, which recovery compares
// with the one it comes back with ("" when the node cannot be read), and any unfence request it
// still carries, which it removes. Such a request was made before this fence began (one is
// honoured only on a released fence, and the fence's recovery removes it): left, it would give
// the node back the moment this fence is released, without the reboot the boot ID would prove.
// The fence takes no step until it is gone.
func (r *NodeFenceReconciler) firstLook(ctx context.Context, nf *v1alpha1.NodeFence) (bootID, nodeUID string, err error) {
	node := &corev1.Node{}
	if err := r.reader().Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node); err != nil {
		return "", "", client.IgnoreNotFound(err)
	}
	if nf.Spec.DryRun {
		return node.Status.NodeInfo.BootID, string(node.UID), nil // a dry run changes nothing, and never recovers
	}
	if err := r.dropUnfenceRequest(ctx, nf, node, "from before this fence", "no step is taken until it is gone"); err != nil {
		return "", "", err
	}
	return node.Status.NodeInfo.BootID, string(node.UID), nil
}

// dropUnfenceRequest removes the unfence request node carries, if any, made when (the event
// says so) no request can be about this fence's release yet; then says so. blocked says what
// waits on the removal, for the error when it fails.
func (r *NodeFenceReconciler) dropUnfenceRequest(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, when, blocked string) error {
	text, present := node.Annotations[v1alpha1.AnnotationUnfenceRequest]
	by, byPresent := node.Annotations[v1alpha1.AnnotationUnfenceRequestedBy]
	if !present && !byPresent {
		return nil
	}
	if err := r.removeRequest(ctx, node, v1alpha1.AnnotationUnfenceRequest, v1alpha1.AnnotationUnfenceRequestedBy); err != nil {
		return fmt.Errorf("removing the unfence request node %s carried %s (%s): %w", nf.Spec.NodeName, when, blocked, err)
	}
	r.event(ctx, nf, corev1.EventTypeWarning, ReasonStaleUnfenceRequest,
		"node %s carried an unfence request %s (%s=%q, requested by %q): removed, since it cannot vouch for the node as the fence leaves it; once the fence is released, confirm the node clean again if it is",
		nf.Spec.NodeName, when, v1alpha1.AnnotationUnfenceRequest, truncate(text, 256), by)
	return nil
}

// removeRequest removes a request annotation and its recorded requester from node, in one
// write that fails on a concurrent change of the Node.
func (r *NodeFenceReconciler) removeRequest(ctx context.Context, node *corev1.Node, key, byKey string) error {
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	delete(node.Annotations, key)
	delete(node.Annotations, byKey)
	return r.Client.Patch(ctx, node, patch)
}

// reader reads what must not be stale: the API server when the reconciler has its reader.
func (r *NodeFenceReconciler) reader() client.Reader { return apiOr(r.APIReader, r.Client) }

// apiOr is api, the reader that goes to the API server, or c when there is none (tests).
func apiOr(api client.Reader, c client.Reader) client.Reader {
	if api != nil {
		return api
	}
	return c
}

func (r *NodeFenceReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func methodNames(nf *v1alpha1.NodeFence) string {
	s := ""
	for i, m := range nf.Spec.Methods {
		if i > 0 {
			s += ", then "
		}
		s += m.Name
	}
	return s
}

// noChain says why nf's methods cannot make a chain, "" when they can. The CRD refuses both
// cases; a record stored before its rules, or written around them, fails before its first step
// rather than taking one with nothing to take it by (no method), or with steps that cannot tell
// their methods apart (two of one name: the planner would take the first for the second, and
// go back to it after every failure, without end).
func noChain(nf *v1alpha1.NodeFence) string {
	if len(nf.Spec.Methods) == 0 {
		return fmt.Sprintf("NodeFence %s names no method (spec.methods is empty): nothing can fence node %s; nothing was taken or released. Delete it; the node's policy makes a new one if it must", nf.Name, nf.Spec.NodeName)
	}
	if name, twice := methodNamedTwice(nf.Spec.Methods); twice && len(nf.Status.Steps) == 0 {
		return fmt.Sprintf("NodeFence %s names method %q more than once in spec.methods: its steps could not tell them apart; nothing was taken or released. Delete it; the node's policy makes a new one if it must", nf.Name, name)
	}
	return ""
}

// methodNamedTwice is the first name two of methods share, if any.
func methodNamedTwice(methods []v1alpha1.Method) (string, bool) {
	seen := map[string]bool{}
	for _, m := range methods {
		if seen[m.Name] {
			return m.Name, true
		}
		seen[m.Name] = true
	}
	return "", false
}
