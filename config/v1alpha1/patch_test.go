package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// The bytes the two callers sent before they shared AnnotationRemoval: the agent provider's
// removal of its order (the NodeFence's UID tested first) and the node controller's removal of
// a fence request with its requester (each key's test before its removal, in key order).
func TestAnnotationRemoval(t *testing.T) {
	for _, tc := range []struct {
		name   string
		uid    string
		values map[string]string
		want   string
	}{
		{"an order, from one NodeFence", "fence-uid", map[string]string{AnnotationExecutorCommand: `{"id":"x"}`},
			`[{"op":"test","path":"/metadata/uid","value":"fence-uid"},{"op":"test","path":"/metadata/annotations/palisade.dev~1executor-command","value":"{\"id\":\"x\"}"},{"op":"remove","path":"/metadata/annotations/palisade.dev~1executor-command"}]`},
		{"a request and its requester", "", map[string]string{AnnotationFenceRequestedBy: "carol", AnnotationFenceRequest: "disk errors"},
			`[{"op":"test","path":"/metadata/annotations/palisade.dev~1fence-request","value":"disk errors"},{"op":"remove","path":"/metadata/annotations/palisade.dev~1fence-request"},{"op":"test","path":"/metadata/annotations/palisade.dev~1fence-requested-by","value":"carol"},{"op":"remove","path":"/metadata/annotations/palisade.dev~1fence-requested-by"}]`},
		{"a key with a tilde", "", map[string]string{"a~b/c": "v"},
			`[{"op":"test","path":"/metadata/annotations/a~0b~1c","value":"v"},{"op":"remove","path":"/metadata/annotations/a~0b~1c"}]`},
	} {
		if got := string(AnnotationRemoval(types.UID(tc.uid), tc.values)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
