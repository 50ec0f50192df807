package fencing

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

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
