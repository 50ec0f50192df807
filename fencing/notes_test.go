package fencing

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/fake"
)

// BoundedNotes passes a note that fits as written (formatted as the recorder formats it) and
// cuts a longer one to 1024 bytes on a UTF-8 boundary, ending in "…".
func TestBoundedNotes(t *testing.T) {
	rec := &recorder{}
	b := BoundedNotes(rec)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	b.Eventf(node, nil, corev1.EventTypeNormal, "Short", "Fence", "100%% of %s", "n1")
	long := strings.Repeat("ж", 700) // 1400 bytes
	b.Eventf(node, nil, corev1.EventTypeWarning, "Long", "Fence", "request %q refused", long)
	b.Eventf(node, nil, corev1.EventTypeWarning, "Exact", "Fence", "%s", strings.Repeat("x", noteLimit))
	if got := rec.said("Short"); len(got) != 1 || got[0] != "100% of n1" {
		t.Errorf("short note %q, want it as written", got)
	}
	got := rec.said("Long")
	if len(got) != 1 || len(got[0]) > noteLimit || len(got[0]) < noteLimit-4 || !utf8.ValidString(got[0]) ||
		!strings.HasPrefix(got[0], `request "жж`) || !strings.HasSuffix(got[0], "…") {
		t.Errorf("long note %q: want it cut to at most %d bytes of valid UTF-8, ending in …", got, noteLimit)
	}
	if got := rec.said("Exact"); len(got) != 1 || got[0] != strings.Repeat("x", noteLimit) {
		t.Errorf("a note of exactly %d bytes was changed", noteLimit)
	}
}

// A detector's reason longer than spec.reason holds (it names nodes, up to 253 characters each)
// is cut, not left for the API server to refuse the NodeFence and the node to go unfenced.
func TestLongReasonIsCutOnTheFence(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	var peers []string
	for i := range 6 {
		peers = append(peers, strings.Repeat(string(rune('a'+i)), 253))
	}
	reason := "Dead: lease expired; not reached by " + strings.Join(peers, ", ")
	nf := newNodeFence(node, poolPolicy(ipmiMethod), v1alpha1.TriggerDetected, reason)
	if r := nf.Spec.Reason; len(r) > v1alpha1.MaxReason || !utf8.ValidString(r) || !strings.HasPrefix(r, "Dead: lease expired; not reached by aaa") || !strings.HasSuffix(r, "…") {
		t.Errorf("spec.reason of %d bytes (from %d): want at most %d, cut with …", len(r), len(reason), v1alpha1.MaxReason)
	}
	short := newNodeFence(node, poolPolicy(ipmiMethod), v1alpha1.TriggerDetected, "Dead: lease expired")
	if short.Spec.Reason != "Dead: lease expired" {
		t.Errorf("a short reason became %q", short.Spec.Reason)
	}
}

// A provider's error a page long (a BMC's HTML error page, a cloud's verbose refusal) is cut in
// the step's message and in the Fenced condition: a condition's message holds 32768 at most,
// and a longer one gets the whole status write refused, the fence stuck where it was. The fence
// fails as it should, saying why, with the start of the provider's words kept.
func TestLongProviderErrorIsCutOnTheRecord(t *testing.T) {
	page := "<html>" + strings.Repeat("<p>internal error</p>", 100_000) + "</html>" // 2 MB
	w := newWorld(t, "ipmi")
	w.power.InjectError(fake.MethodFence, providers.NewError(providers.ReasonAuthFailed, errors.New(page)))
	nf := w.run(t)
	if nf.Status.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("phase %s, want Failed", nf.Status.Phase)
	}
	for _, s := range nf.Status.Steps {
		if len(s.Message) > maxStepMessage || !utf8.ValidString(s.Message) {
			t.Errorf("step %s holds a message of %d bytes, want at most %d", s.Name, len(s.Message), maxStepMessage)
		}
	}
	for _, c := range nf.Status.Conditions {
		if len(c.Message) > maxConditionMessage {
			t.Errorf("condition %s holds a message of %d bytes, want at most %d", c.Type, len(c.Message), maxConditionMessage)
		}
	}
	c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionFenced)
	if c == nil || !strings.Contains(c.Message, "<html><p>internal error</p>") || !strings.Contains(c.Message, "…") {
		t.Errorf("Fenced condition %+v: want the provider's words, cut", c)
	}
}
