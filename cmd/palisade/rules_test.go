package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// The controller's rules as the CLI restates them (policies.go, request.go, verdict.go), on
// the cases the controller's own tests pin in fencing/.

func TestMatchPolicies(t *testing.T) {
	policy := func(name string, sel metav1.LabelSelector) v1alpha1.FencingPolicy {
		return v1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.FencingPolicySpec{NodeSelector: sel}}
	}
	bad := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: "Is"}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"role": "db"}}}
	lastDB, lastWeb := "role=db", "role=web"
	broken := func(name string, last *string) v1alpha1.FencingPolicy {
		p := policy(name, bad)
		p.Status.NodeSelector = last
		return p
	}
	tests := []struct {
		name     string
		policies []v1alpha1.FencingPolicy
		want     string // the chosen policy, "" for none
	}{
		{"none", nil, ""},
		{"first by name, not by listing", []v1alpha1.FencingPolicy{policy("z-all", metav1.LabelSelector{}),
			policy("a-db", metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}})}, "a-db"},
		{"an invalid selector is skipped", []v1alpha1.FencingPolicy{policy("a-bad", bad), policy("b-all", metav1.LabelSelector{})}, "b-all"},
		{"no match", []v1alpha1.FencingPolicy{policy("web", metav1.LabelSelector{MatchLabels: map[string]string{"role": "web"}})}, ""},
		{"a broken edit: the selector last in force decides", []v1alpha1.FencingPolicy{broken("a-db", &lastDB), policy("b-all", metav1.LabelSelector{})}, "a-db"},
		{"a broken edit whose last selector does not match", []v1alpha1.FencingPolicy{broken("a-web", &lastWeb), policy("b-all", metav1.LabelSelector{})}, "b-all"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			matches, chosen := matchPolicies(tc.policies, node)
			got := ""
			if chosen >= 0 {
				got = matches[chosen].policy.Name
			}
			if got != tc.want {
				t.Errorf("chosen %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStagesAndChains(t *testing.T) {
	chain := []v1alpha1.Method{executor("stop", "both"), ipmi("ipmi", ""), ipmi("power", "both"), ipmi("last", "")}
	var got [][]string
	for _, st := range stages(chain) {
		var names []string
		for _, m := range st.methods {
			names = append(names, m.Name)
		}
		got = append(got, names)
	}
	if diff := cmp.Diff([][]string{{"stop", "power"}, {"ipmi"}, {"last"}}, got); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
	var dead []string
	for _, m := range withoutAgent(levelOrder(chain)) {
		dead = append(dead, m.Name)
	}
	if diff := cmp.Diff([]string{"ipmi", "last"}, dead); diff != "" {
		t.Errorf("the chain of a Dead node (-want +got):\n%s", diff)
	}
}

func TestMaxUnhealthy(t *testing.T) {
	v := func(iv intstr.IntOrString) *intstr.IntOrString { return &iv }
	tests := []struct {
		guard *intstr.IntOrString
		nodes int
		want  int
	}{
		{nil, 10, 4}, {nil, 2, 1}, {nil, 0, 0}, {v(intstr.FromInt32(3)), 100, 3},
		{v(intstr.FromString("0%")), 10, 0}, {v(intstr.FromString("5%")), 10, 1},
	}
	for _, tc := range tests {
		p := &v1alpha1.FencingPolicy{Spec: v1alpha1.FencingPolicySpec{StormGuard: v1alpha1.StormGuard{MaxUnhealthy: tc.guard}}}
		if got, _ := maxUnhealthy(p, tc.nodes); got != tc.want {
			t.Errorf("maxUnhealthy(%v, %d nodes) = %d, want %d", tc.guard, tc.nodes, got, tc.want)
		}
	}
}

func TestRequestText(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"  disk errors\t", "disk errors", ""},
		{"", "", "is empty"},
		{" \t ", "", "is empty"},
		{strings.Repeat("ü", 256), strings.Repeat("ü", 256), ""},
		{strings.Repeat("x", 257), "", "257 characters long"},
		{"a\tb", "", "non-printable"},
		{"a\u00a0b", "", "non-printable"}, // unicode.IsPrint: no space but ASCII's
		{"ünïcödé ✓", "ünïcödé ✓", ""},
	}
	for _, tc := range tests {
		got, err := requestText(tc.in, "--reason", "why")
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("requestText(%q) = %q, %v; want %q, error %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestAPIErrorWithoutCRDs(t *testing.T) {
	err := apiError(&meta.NoKindMatchError{GroupKind: v1alpha1.GroupVersion.WithKind("NodeFence").GroupKind()}, "list", nodeFenceResource, "", "")
	if !strings.Contains(err.Error(), "the cluster does not serve nodefences (API group fencing.palisade.dev): Palisade's CRDs are not installed there") {
		t.Errorf("error %q does not say the CRDs are missing", err)
	}
}

// An interrupt at the question ends the command (signal.NotifyContext keeps Ctrl-C from
// killing the process while it reads the terminal).
func TestConfirmInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, w := io.Pipe() // never answers
	defer w.Close()
	err := confirm(ctx, streams{in: r, out: io.Discard}, "Fence node n?")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("confirm after an interrupt: %v, want the interrupt", err)
	}
}

// fenceVerdict says what a failed fence released when its node showed life between release
// steps, and that a dry run's record gives way once the policy fences for real.
func TestFenceVerdictOfEndedFences(t *testing.T) {
	now := time.Now()
	failed := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "p"}}
	failed.Status.Phase = v1alpha1.PhaseFailed
	if got := fenceVerdict("n1", failed, now); !strings.Contains(got, "released nothing") {
		t.Errorf("a failed fence that released nothing: %q", got)
	}
	// An attachment someone else deleted, freed from its stuck attacher by the fence, counts.
	failed.Status.AttachmentsForced = []string{"csi-a (pv-a)"}
	if got := fenceVerdict("n1", failed, now); !strings.Contains(got, "never unpublished: csi-a (pv-a)") || strings.Contains(got, "released nothing") {
		t.Errorf("a failed fence that freed an attachment from its attacher: %q", got)
	}
	failed.Status.AttachmentsForced = nil
	// A DeletePods taken at a second attempt before the sign of life stopped it may have acted,
	// its count lost with the controller that took the first; one stopped at its first did not.
	failed.Status.Steps = []v1alpha1.Step{{Name: v1alpha1.StepDeletePods, State: v1alpha1.StepFailed, Reason: v1alpha1.ReasonNodeAliveAfterFence, Attempts: 2}}
	if got := fenceVerdict("n1", failed, now); !strings.Contains(got, "after it took DeletePods, which may have force-deleted pods") || strings.Contains(got, "released nothing") {
		t.Errorf("a failed fence whose DeletePods may have acted: %q", got)
	}
	failed.Status.Steps[0].Attempts = 1
	if got := fenceVerdict("n1", failed, now); !strings.Contains(got, "released nothing") {
		t.Errorf("a failed fence whose DeletePods was stopped before it acted: %q", got)
	}
	failed.Status.Steps = nil
	failed.Status.PodsDeleted = 2
	if got := fenceVerdict("n1", failed, now); !strings.Contains(got, "force-deleted 2 pods") || strings.Contains(got, "released nothing") {
		t.Errorf("a failed fence that force-deleted 2 pods: %q", got)
	}
	dry := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1", PolicyName: "p", DryRun: true, Trigger: v1alpha1.TriggerDetected, Reason: "Dead"}}
	if got := fenceVerdict("n1", dry, now); !strings.Contains(got, "a new fence replaces this record") {
		t.Errorf("a dry run's record: %q", got)
	}
}
