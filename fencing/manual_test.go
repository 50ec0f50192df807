package fencing

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

func TestParseFenceRequest(t *testing.T) {
	type result struct {
		Reason  string
		Present bool
		Err     bool
	}
	request := func(v string) map[string]string { return map[string]string{v1alpha1.AnnotationFenceRequest: v} }
	tests := []struct {
		name        string
		annotations map[string]string
		want        result
	}{
		{"no annotations", nil, result{}},
		{"other annotations only", map[string]string{"palisade.dev/fence-requested": "x"}, result{}},
		{"a reason", request("disk controller on fire"), result{Reason: "disk controller on fire", Present: true}},
		{"surrounding space is trimmed", request("  \tkernel panic \n"), result{Reason: "kernel panic", Present: true}},
		{"printable non-ASCII", request("Knoten hängt – Ticket 42"), result{Reason: "Knoten hängt – Ticket 42", Present: true}},
		{"256 characters", request(strings.Repeat("r", 256)), result{Reason: strings.Repeat("r", 256), Present: true}},
		{"empty", request(""), result{Present: true, Err: true}},
		{"only space", request("   "), result{Present: true, Err: true}},
		{"257 characters", request(strings.Repeat("r", 257)), result{Present: true, Err: true}},
		{"256 non-ASCII characters", request(strings.Repeat("é", 256)), result{Reason: strings.Repeat("é", 256), Present: true}},
		{"257 non-ASCII characters", request(strings.Repeat("é", 257)), result{Present: true, Err: true}},
		{"a line break inside", request("first\nsecond"), result{Present: true, Err: true}},
		{"a control character inside", request("ring\a the bell"), result{Present: true, Err: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: tt.annotations}}
			reason, present, err := parseFenceRequest(node)
			got := result{Reason: reason, Present: present, Err: err != nil}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseFenceRequest (-want +got):\n%s\nerror: %v", diff, err)
			}
			if err != nil && !strings.Contains(err.Error(), v1alpha1.AnnotationFenceRequest) {
				t.Errorf("error %q does not name the annotation", err)
			}
		})
	}
}

// The requester is the authenticated user the API server recorded, never the field manager:
// any client can name itself anything there.
func TestRequester(t *testing.T) {
	fields := func(manager, annotation string) metav1.ManagedFieldsEntry {
		raw := `{"f:metadata":{"f:annotations":{"f:` + annotation + `":{}}}}`
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}}
	}
	tests := []struct {
		name        string
		managed     []metav1.ManagedFieldsEntry
		annotations map[string]string
		want        string
	}{
		{"nothing recorded", nil, nil, ""},
		{"the field manager does not name the requester", []metav1.ManagedFieldsEntry{fields("kubectl-annotate", v1alpha1.AnnotationFenceRequest)}, nil, ""},
		{"the recorded user does", []metav1.ManagedFieldsEntry{fields("forged-manager", v1alpha1.AnnotationFenceRequest)},
			map[string]string{v1alpha1.AnnotationFenceRequestedBy: "alice@example.com"}, "alice@example.com"},
		{"a ServiceAccount", nil, map[string]string{v1alpha1.AnnotationFenceRequestedBy: " system:serviceaccount:ops:fence-bot "}, "system:serviceaccount:ops:fence-bot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: tt.managed, Annotations: tt.annotations}}
			if got := requester(node); got != tt.want {
				t.Errorf("requester = %q, want %q", got, tt.want)
			}
		})
	}
}
