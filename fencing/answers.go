package fencing

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// A request is acted on once. The fence answers the fence requests made before it was created
// (its own, for a manual fence) or while it ran: on its release they are removed at the first
// look after it (dropAnsweredFenceRequest), and on its failure just before the failure is
// recorded (dropRequestsAnswered). A request still on the node after that was made while the
// node was held (kept: it fences the node again once it is given back) or after the failure
// (it fences the node once the failed NodeFence is deleted).

// dropRequestsAnswered removes, before nf is recorded Failed, the valid fence request the node
// carries, nf's own or one made while it ran: the failure answers it. Left, it would fence the
// node again the moment the failed NodeFence is deleted, long after its requester saw the
// fence fail. The removal comes before the record, so that a request still on the node once
// the record says Failed was made after the failure (the node reconciler says it waits). A
// malformed request fences nothing and stays (the node reconciler says so).
func (r *NodeFenceReconciler) dropRequestsAnswered(ctx context.Context, nf *v1alpha1.NodeFence) error {
	node := &corev1.Node{}
	if err := r.reader().Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		return fmt.Errorf("reading node %s for the fence requests its failed fence answered: %w", nf.Spec.NodeName, err)
	}
	text, present, err := parseFenceRequest(node)
	if !present || err != nil {
		return nil
	}
	_, later := laterFenceRequest(nf, node)
	by := requester(node)
	if err := r.removeRequest(ctx, node, v1alpha1.AnnotationFenceRequest, v1alpha1.AnnotationFenceRequestedBy); err != nil {
		return fmt.Errorf("removing the fence request node %s carried when its fence failed (the failure is recorded after it): %w", node.Name, err)
	}
	which := "the request this fence was made for"
	if later {
		which = "a request made while this fence was under way"
	}
	r.event(ctx, nf, corev1.EventTypeNormal, ReasonFenceRequestAnswered,
		"node %s carried %s (%s=%q, requested by %q): this fence answered it and failed, so it was removed (a request is acted on once). Once what failed is fixed, delete this NodeFence and request again if the node is still to be fenced",
		node.Name, which, v1alpha1.AnnotationFenceRequest, truncate(text, 256), by)
	return nil
}

// standing is how a node's NodeFence stands, as far as a request made now is concerned.
type standing string

const (
	standingNone     standing = "none"      // no NodeFence, or one Recovered: the node is not fenced
	standingDryRun   standing = "dry-run"   // a dry run's record: it holds nothing
	standingUnderWay standing = "under-way" // taking its steps, or released and not looked at since
	standingHeld     standing = "held"      // released and held fenced: recovery owns the node
	standingFailed   standing = "failed"
	standingDeleting standing = "deleting"
)

// standingOf says how nf (nil: none) stands. A released fence not looked at since its release
// (no Recovered condition yet) still counts as under way: its first look removes the requests
// made before the release.
func standingOf(nf *v1alpha1.NodeFence) standing {
	switch {
	case nf == nil:
		return standingNone
	case !nf.DeletionTimestamp.IsZero():
		return standingDeleting
	case nf.Spec.DryRun:
		return standingDryRun
	case nf.Status.Phase == v1alpha1.PhaseRecovered:
		return standingNone
	case nf.Status.Phase == v1alpha1.PhaseFailed:
		return standingFailed
	case nf.Status.Phase == v1alpha1.PhaseReleased && meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered) != nil:
		return standingHeld
	}
	return standingUnderWay
}

// answer is what the node reconciler says of a request it does not act on: an event on the
// Node, once per key (the request's value and what it is said against).
type answer struct {
	key, typ, reason, msg string
}

// answerFn makes the answer to one of node's requests given its NodeFence nf (nil: none); nil
// when there is nothing to say.
type answerFn func(node *corev1.Node, nf *v1alpha1.NodeFence) *answer

// sayOnce gives the answer of fn about node's request on topic (its annotation), once per
// answer's key. It is given only when the API server's copies of the Node and its NodeFence
// lead to the same answer as the cache's: a cache behind (a request just removed, a fence just
// ended) would otherwise answer a request that is gone, or with what no longer holds; its
// catching up wakes the node again.
func (r *NodeReconciler) sayOnce(ctx context.Context, node *corev1.Node, topic string, fn answerFn) error {
	if _, ok := node.Annotations[topic]; !ok {
		r.answered.forget(node.Name, topic)
		return nil
	}
	nf, err := fenceOf(ctx, r.Client, node.Name)
	if err != nil {
		return err
	}
	a := fn(node, nf)
	if a == nil {
		r.answered.forget(node.Name, topic)
		return nil
	}
	if r.answered.said(node.Name, topic, a.key) {
		return nil
	}
	fresh := &corev1.Node{}
	if err := r.reader().Get(ctx, client.ObjectKeyFromObject(node), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading node %s from the API server to answer its request: %w", node.Name, err)
	}
	freshFence, err := fenceOf(ctx, r.reader(), node.Name)
	if err != nil {
		return err
	}
	if b := fn(fresh, freshFence); b == nil || b.key != a.key {
		ctrl.LoggerFrom(ctx).V(1).Info("a request's answer read from the cache is not the API server's: said once the cache has caught up", "topic", topic)
		return nil
	}
	var related runtime.Object
	if nf != nil {
		related = nf
	}
	action := "FenceRequest"
	if topic == v1alpha1.AnnotationUnfenceRequest {
		action = "UnfenceRequest"
	}
	r.Recorder.Eventf(node, related, a.typ, a.reason, action, "%s", a.msg)
	r.answered.note(node.Name, topic, a.key)
	return nil
}

// fenceOf is node's NodeFence as reader has it, nil when there is none.
func fenceOf(ctx context.Context, reader client.Reader, node string) (*v1alpha1.NodeFence, error) {
	nf := &v1alpha1.NodeFence{}
	if err := reader.Get(ctx, client.ObjectKey{Name: node}, nf); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the NodeFence of node %s: %w", node, err)
	}
	return nf, nil
}

// fenceRequestWaiting answers a fence request made while a fence of the node stands (one not
// free to be replaced: fenceable), under the node's policy p (nil: none): what becomes of it.
// A fence's own request, and one the fence under way answers, are answered by that fence in
// its time; this says so at once.
func fenceRequestWaiting(p *v1alpha1.FencingPolicy) answerFn {
	return func(node *corev1.Node, nf *v1alpha1.NodeFence) *answer {
		text, present, err := parseFenceRequest(node)
		st := standingOf(nf)
		if !present || st == standingNone || st == standingDryRun {
			return nil // no request, or no fence standing: manualRequest acts on it
		}
		then := actedOn(p)
		key := fmt.Sprintf("%s/%s/%s/%s/%s", nf.UID, st, then, requester(node), node.Annotations[v1alpha1.AnnotationFenceRequest])
		if err != nil {
			return &answer{key: key, typ: corev1.EventTypeWarning, reason: ReasonInvalidFenceRequest,
				msg: fmt.Sprintf("fence request ignored: %v; it fences nothing, now or once NodeFence %s is over", err, nf.Name)}
		}
		_, later := laterFenceRequest(nf, node)
		req := fmt.Sprintf("fence request %q (requested by %s)", truncate(text, 256), orUnknown(requester(node)))
		a := &answer{key: key, typ: corev1.EventTypeNormal, reason: ReasonFenceRequestWaiting}
		switch {
		case st == standingFailed:
			a.typ = corev1.EventTypeWarning
			a.msg = fmt.Sprintf("%s waits: NodeFence %s of node %s failed and stands; once that NodeFence is deleted (kubectl delete nodefence %s, when what failed is fixed), the request %s. Remove the annotation if that is not meant",
				req, nf.Name, node.Name, nf.Name, then)
		case st == standingDeleting:
			a.msg = fmt.Sprintf("%s waits: NodeFence %s of node %s is being deleted; once it is gone, the request %s. Remove the annotation if that is not meant", req, nf.Name, node.Name, then)
		case !later:
			return nil // the fence's own request: the fence answers it
		case st == standingHeld:
			a.msg = fmt.Sprintf("%s made while node %s is held fenced by NodeFence %s (released, not yet given back): it is kept, and once the node is given back (%s) the request %s. Remove the annotation if that is not meant",
				req, node.Name, nf.Name, ReasonFenceRequestKept, then)
		default:
			a.msg = fmt.Sprintf("%s made while NodeFence %s of node %s is under way (phase %s): that fence answers it, and it is removed at the fence's release or failure (%s); a request is acted on once, so request again after that if the node is to be fenced once more",
				req, nf.Name, node.Name, orPending(nf.Status.Phase), ReasonFenceRequestAnswered)
		}
		return a
	}
}

// actedOn says what a fence request does once nothing stands in its way, under the node's
// policy p (nil: none): manualRequest's judgement.
func actedOn(p *v1alpha1.FencingPolicy) string {
	switch {
	case p == nil:
		return "is removed, fencing nothing: no FencingPolicy covers the node"
	case p.Spec.DryRun:
		return fmt.Sprintf("is recorded as a dry run of policy %s and removed, fencing nothing", p.Name)
	}
	return fmt.Sprintf("fences the node (policy %s)", p.Name)
}

// unfenceRequestIgnored answers an unfence request that nothing acts on: one on a node whose
// NodeFence (nil: none) is not a released fence holding it, which recovery judges (judgeClean,
// which says a malformed one as well).
func unfenceRequestIgnored(node *corev1.Node, nf *v1alpha1.NodeFence) *answer {
	text, present, err := parseUnfenceRequest(node)
	st := standingOf(nf)
	if !present || st == standingHeld {
		return nil
	}
	uid := ""
	if nf != nil {
		uid = string(nf.UID)
	}
	key := fmt.Sprintf("%s/%s/%s", uid, st, node.Annotations[v1alpha1.AnnotationUnfenceRequest])
	why := unfenceIgnoredWhy(node.Name, nf, st)
	if err != nil {
		return &answer{key: key, typ: corev1.EventTypeWarning, reason: ReasonInvalidUnfenceRequest,
			msg: fmt.Sprintf("unfence request ignored: %v. Nothing changes: %s", err, why)}
	}
	by := orUnknown(strings.TrimSpace(node.Annotations[v1alpha1.AnnotationUnfenceRequestedBy]))
	return &answer{key: key, typ: corev1.EventTypeWarning, reason: ReasonUnfenceRequestIgnored,
		msg: fmt.Sprintf("unfence request %q (requested by %s) ignored, nothing changes: %s", truncate(text, 256), by, why)}
}

// unfenceIgnoredWhy says why an unfence request on node, whose NodeFence nf stands as st,
// changes nothing.
func unfenceIgnoredWhy(node string, nf *v1alpha1.NodeFence, st standing) string {
	switch st {
	case standingNone:
		return fmt.Sprintf("node %s is not fenced, so there is nothing to unfence (a fence of it begun later removes the request before its first step)", node)
	case standingDryRun:
		return fmt.Sprintf("NodeFence %s is a dry run's record: it holds nothing, so there is nothing to unfence", nf.Name)
	case standingFailed:
		return fmt.Sprintf("NodeFence %s failed, and an unfence request acts only on a released fence; deleting the NodeFence ends the fence (kubectl delete nodefence %s)", nf.Name, nf.Name)
	case standingDeleting:
		return fmt.Sprintf("NodeFence %s is being deleted, and an unfence request acts only on a released fence", nf.Name)
	}
	return fmt.Sprintf("NodeFence %s is under way (phase %s), and a confirmation counts only for the release it was made after: this one is removed before the fence's first step or at the first look after its release (%s). Confirm the node clean once the fence is released",
		nf.Name, orPending(nf.Status.Phase), ReasonStaleUnfenceRequest)
}

// orPending is the phase, Pending when none is recorded yet.
func orPending(p v1alpha1.Phase) v1alpha1.Phase {
	if p == "" {
		return v1alpha1.PhasePending
	}
	return p
}

// saidOnce remembers, by node and topic (a request annotation), the key of the last answer
// given, so that a request is answered once rather than at every reconcile of its node. A
// new leader starts from nothing, and answers once more.
type saidOnce struct {
	mu   sync.Mutex
	last map[string]map[string]string // by node, then topic
}

// said says whether key is the last answer given on node's topic.
func (s *saidOnce) said(node, topic, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.last[node][topic]
	return ok && k == key
}

// note records key as the answer given on node's topic.
func (s *saidOnce) note(node, topic, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]map[string]string{}
	}
	if s.last[node] == nil {
		s.last[node] = map[string]string{}
	}
	s.last[node][topic] = key
}

// forget drops what was said on node's topic ("": every topic, the node was deleted).
func (s *saidOnce) forget(node, topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if topic == "" {
		delete(s.last, node)
		return
	}
	delete(s.last[node], topic)
	if len(s.last[node]) == 0 {
		delete(s.last, node)
	}
}
