package fencing

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// FuzzParseFenceRequest checks the reader of the palisade.dev/fence-request annotation anyone
// allowed to annotate a node can write: an accepted reason is 1 to 256 printable characters
// with no surrounding space and reads back the same; a refused one says why and gives no reason.
func FuzzParseFenceRequest(f *testing.F) {
	for _, s := range []string{
		"disk controller replaced", "  rack 7 power work  ", "", "   ", "\t\n",
		strings.Repeat("a", 256), strings.Repeat("é", 257), "bad\x00byte", "line\nbreak",
		"\xff\xfe", "ok\u200bzero-width", "émoji 🔥",
	} {
		f.Add(s, "system:admin")
	}
	f.Fuzz(func(t *testing.T, v, by string) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{
			v1alpha1.AnnotationFenceRequest: v, v1alpha1.AnnotationFenceRequestedBy: by,
		}}}
		reason, ok, err := parseFenceRequest(node)
		if !ok {
			t.Fatalf("parseFenceRequest(%q) missed the annotation", v)
		}
		if got := requester(node); got != strings.TrimSpace(got) || !strings.Contains(by, got) {
			t.Fatalf("requester(%q) = %q", by, got)
		}
		if err != nil {
			if err.Error() == "" || reason != "" {
				t.Fatalf("parseFenceRequest(%q) refused with reason %q, message %q", v, reason, err)
			}
			return
		}
		n := utf8.RuneCountInString(reason)
		if n < 1 || n > v1alpha1.MaxRequestText || reason != strings.TrimSpace(reason) ||
			strings.IndexFunc(reason, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Fatalf("parseFenceRequest(%q) accepted %q", v, reason)
		}
		node.Annotations[v1alpha1.AnnotationFenceRequest] = reason
		if again, _, err := parseFenceRequest(node); err != nil || again != reason {
			t.Fatalf("the accepted reason %q reads back as %q, %v", reason, again, err)
		}
	})
}

// FuzzMaxUnhealthy checks the storm guard of a FencingPolicy, which a cluster user writes: any
// count or percentage resolves without panicking, a percentage to between 0 and the node count.
func FuzzMaxUnhealthy(f *testing.F) {
	for _, s := range []string{"10%", "0%", "100%", "250%", "-5%", "%", "1.5%", "abc", "", "33"} {
		f.Add(s, int32(0), false, 10)
	}
	f.Add("", int32(3), true, 10)
	f.Add("", int32(-3), true, 0)
	f.Fuzz(func(t *testing.T, str string, n int32, isInt bool, nodes int) {
		if nodes < 0 || nodes > 1<<20 {
			return
		}
		v := intstr.FromString(str)
		if isInt {
			v = intstr.FromInt32(n)
		}
		p := &v1alpha1.FencingPolicy{}
		p.Spec.StormGuard.MaxUnhealthy = &v
		got := maxUnhealthy(p, nodes)
		if again := maxUnhealthy(p, nodes); again != got {
			t.Fatalf("maxUnhealthy(%v, %d) is not deterministic: %d then %d", v, nodes, got, again)
		}
		if !isInt && strings.HasSuffix(str, "%") && !strings.HasPrefix(str, "-") && got < 0 {
			t.Fatalf("maxUnhealthy(%q, %d) = %d", str, nodes, got)
		}
	})
}
