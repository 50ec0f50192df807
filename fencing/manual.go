package fencing

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// parseFenceRequest validates the palisade.dev/fence-request annotation: its value is the
// reason, 1 to 256 printable characters. ok is false when the node carries no request.
func parseFenceRequest(node *corev1.Node) (reason string, ok bool, err error) {
	return parseRequest(node, v1alpha1.AnnotationFenceRequest, "why the node is to be fenced")
}

// parseUnfenceRequest validates the palisade.dev/unfence-request annotation the same way: its
// value says how the node was made clean.
func parseUnfenceRequest(node *corev1.Node) (text string, ok bool, err error) {
	return parseRequest(node, v1alpha1.AnnotationUnfenceRequest, "how the node was made clean")
}

// parseRequest validates a request annotation whose value is a text saying what
// (v1alpha1.RequestText, the rule the CLI applies too); ok is false when the node does not
// carry it.
func parseRequest(node *corev1.Node, key, what string) (text string, ok bool, err error) {
	v, ok := node.Annotations[key]
	if !ok {
		return "", false, nil
	}
	text, err = v1alpha1.RequestText(v, "annotation "+key, what)
	return text, true, err
}

// requester is the authenticated user the API server recorded as having set the request
// (palisade.dev/fence-requested-by, written by the chart's admission policies), "" when none is
// recorded. The field manager is not used: any client can name itself anything there.
func requester(node *corev1.Node) string {
	return strings.TrimSpace(node.Annotations[v1alpha1.AnnotationFenceRequestedBy])
}

// confirmRequest reads node from the API server and returns that copy when it carries the fence
// request the cached copy shows (the same value), nil when it does not. A fence's recovery removes
// the request it answered from the Node before it records the fence Recovered, and that record's
// event may wake the node reconciler while its cache still holds the Node from before the
// removal: a fence made from that copy would power off the node just given back. When the
// copies differ the cache is behind, and its catching up wakes the node again.
func (r *NodeReconciler) confirmRequest(ctx context.Context, node *corev1.Node) (*corev1.Node, error) {
	fresh := &corev1.Node{}
	if err := r.reader().Get(ctx, client.ObjectKeyFromObject(node), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading node %s from the API server to confirm its fence request: %w", node.Name, err)
	}
	v, ok := fresh.Annotations[v1alpha1.AnnotationFenceRequest]
	if !ok || v != node.Annotations[v1alpha1.AnnotationFenceRequest] {
		ctrl.LoggerFrom(ctx).V(1).Info("the fence request read is not the API server's (the cache is behind, or it changed): judged again once the cache has it", "present", ok)
		return nil, nil
	}
	return fresh, nil
}

// dropRequest removes the fence request node carries (the API server's copy it was judged on)
// and its recorded requester, then says on the Node why (the event). The patch tests both values
// before it removes them, so a request written since the judgement survives: its write wakes
// the node, and it is judged in turn.
func (r *NodeReconciler) dropRequest(ctx context.Context, node *corev1.Node, typ, reason, format string, args ...any) error {
	judged := map[string]string{}
	for _, key := range []string{v1alpha1.AnnotationFenceRequest, v1alpha1.AnnotationFenceRequestedBy} {
		if v, ok := node.Annotations[key]; ok {
			judged[key] = v
		}
	}
	if err := r.Client.Patch(ctx, node.DeepCopy(), client.RawPatch(types.JSONPatchType, v1alpha1.AnnotationRemoval("", judged))); err != nil {
		if fresh, cerr := r.confirmRequest(ctx, node); cerr == nil && fresh == nil {
			ctrl.LoggerFrom(ctx).Info("the fence request changed while it was judged: the new one is judged in turn")
			return nil
		}
		return fmt.Errorf("removing the fence request of node %s (%s): %w", node.Name, reason, err)
	}
	r.Recorder.Eventf(node, nil, typ, reason, "FenceRequest", format, args...)
	return nil
}
