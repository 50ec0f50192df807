package fencing

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// maxRequestReason bounds the reason of a manual fence request.
const maxRequestReason = 256

// parseFenceRequest validates the palisade.dev/fence-request annotation: its value is the
// reason, 1 to 256 printable characters. ok is false when the node carries no request.
func parseFenceRequest(node *corev1.Node) (reason string, ok bool, err error) {
	v, ok := node.Annotations[v1alpha1.AnnotationFenceRequest]
	if !ok {
		return "", false, nil
	}
	reason = strings.TrimSpace(v)
	switch {
	case reason == "":
		return "", true, fmt.Errorf("annotation %s is empty: its value must say why the node is to be fenced", v1alpha1.AnnotationFenceRequest)
	case utf8.RuneCountInString(reason) > maxRequestReason:
		return "", true, fmt.Errorf("annotation %s is %d characters long; at most %d are allowed", v1alpha1.AnnotationFenceRequest, utf8.RuneCountInString(reason), maxRequestReason)
	case strings.IndexFunc(reason, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "", true, fmt.Errorf("annotation %s holds non-printable characters: use plain text", v1alpha1.AnnotationFenceRequest)
	}
	return reason, true, nil
}

// requester is the authenticated user the API server recorded as having set the request
// (palisade.dev/fence-requested-by, written by the chart's admission policies), "" when none is
// recorded. The field manager is not used: any client can name itself anything there.
func requester(node *corev1.Node) string {
	return strings.TrimSpace(node.Annotations[v1alpha1.AnnotationFenceRequestedBy])
}
