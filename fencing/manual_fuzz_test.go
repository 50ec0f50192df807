package fencing

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// The fence-request annotation is anyone-with-patch-rights' input: an accepted reason is the
// trimmed value, 1–256 printable characters; a rejected one gives no reason and an error naming
// the annotation. Both are deterministic.
func FuzzParseFenceRequest(f *testing.F) {
	for _, s := range []string{"disk failing", "  padded  ", "", "   ", "tab\there", "bell\a", strings.Repeat("x", 256),
		strings.Repeat("x", 257), strings.Repeat("é", 256), "\xff\xfe", "ünïcödé ✓"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{v1alpha1.AnnotationFenceRequest: v}}}
		reason, ok, err := parseFenceRequest(node)
		r2, ok2, err2 := parseFenceRequest(node)
		if reason != r2 || ok != ok2 || (err == nil) != (err2 == nil) {
			t.Fatal("parseFenceRequest is not deterministic")
		}
		if !ok {
			t.Fatalf("a node carrying the annotation reads as carrying none (%q)", v)
		}
		if err != nil {
			if reason != "" || !strings.Contains(err.Error(), v1alpha1.AnnotationFenceRequest) {
				t.Fatalf("rejected %q with reason %q and error %v", v, reason, err)
			}
			return
		}
		n := utf8.RuneCountInString(reason)
		if reason != strings.TrimSpace(v) || n < 1 || n > maxRequestReason ||
			strings.IndexFunc(reason, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Fatalf("accepted %q as reason %q", v, reason)
		}
	})
}
