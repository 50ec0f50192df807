package v1alpha1

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The rules of the API that both the controller and the palisade CLI apply: one copy, so that
// the CLI says what the controller will do.

// MaxRequestText bounds the text of a fence or unfence request annotation.
const MaxRequestText = 256

// RequestText checks the text of a request annotation (AnnotationFenceRequest,
// AnnotationUnfenceRequest) as the controller takes it: trimmed, 1 to MaxRequestText
// characters, all printable. subject names the text in errors (the annotation, or a flag),
// what says what it must say.
func RequestText(text, subject, what string) (string, error) {
	text = strings.TrimSpace(text)
	switch {
	case text == "":
		return "", fmt.Errorf("%s is empty: it must say %s", subject, what)
	case utf8.RuneCountInString(text) > MaxRequestText:
		return "", fmt.Errorf("%s is %d characters long; at most %d are allowed", subject, utf8.RuneCountInString(text), MaxRequestText)
	case strings.IndexFunc(text, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "", fmt.Errorf("%s holds non-printable characters (tabs, newlines, control characters): use plain text on one line", subject)
	}
	return text, nil
}

// LevelOrder is the chain as a fence takes it: each level's methods moved up behind the
// level's first method, in their listed order (a level is taken where its first method is
// listed).
func LevelOrder(chain []Method) []Method {
	out := make([]Method, 0, len(chain))
	placed := map[int]bool{}
	for i, m := range chain {
		if placed[i] {
			continue
		}
		out, placed[i] = append(out, m), true
		for j := i + 1; m.Level != "" && j < len(chain); j++ {
			if chain[j].Level == m.Level {
				out, placed[j] = append(out, chain[j]), true
			}
		}
	}
	return out
}

// Describe names the pods the workloads fence for, for messages: "pods on ReadWriteOnce
// volumes, StatefulSet pods or pods matching tier=data". Without workloads (nil), every pod a
// fence would delete.
func (w *Workloads) Describe() string {
	if w == nil {
		return "every pod a fence would delete"
	}
	var parts []string
	if w.RWOVolumes {
		parts = append(parts, "pods on ReadWriteOnce volumes")
	}
	if w.StatefulSets {
		parts = append(parts, "StatefulSet pods")
	}
	if w.PodSelector != nil {
		parts = append(parts, "pods matching "+metav1.FormatLabelSelector(w.PodSelector))
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}

// ClaimModes reads the access modes of the PersistentVolumeClaim namespace/name. An error
// apierrors.IsNotFound accepts says the claim does not exist: a pod needs no fence for it.
// +kubebuilder:object:generate=false
type ClaimModes func(namespace, name string) ([]corev1.PersistentVolumeAccessMode, error)

// WorkloadRule is the rule that says which of a failed node's pods need its fence under a
// policy's workloads: the controller decides by it whether to fence the node, and the CLI
// explains by it. Make one with NewWorkloadRule.
// +kubebuilder:object:generate=false
type WorkloadRule struct {
	workloads *Workloads
	selector  labels.Selector // nil: no podSelector
}

// NewWorkloadRule compiles the workloads' pod selector; w nil: the policy names no workloads,
// and every pod a fence would delete needs it.
func NewWorkloadRule(w *Workloads) (WorkloadRule, error) {
	r := WorkloadRule{workloads: w}
	if w != nil && w.PodSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(w.PodSelector)
		if err != nil {
			return WorkloadRule{}, fmt.Errorf("workloads.podSelector: %w", err)
		}
		r.selector = sel
	}
	return r, nil
}

// FenceNeed is why a pod needs its node fenced; the zero value: it does not.
// +kubebuilder:object:generate=false
type FenceNeed struct {
	// Any: the policy names no workloads; the pod is one the fence would delete.
	Any bool
	// StatefulSet: a StatefulSet owns the pod (workloads.statefulSets).
	StatefulSet bool
	// Selector is workloads.podSelector when it selects the pod.
	Selector string
	// RWOClaims are the pod's claims only one node may attach (workloads.rwoVolumes).
	RWOClaims []string
}

// Needed says whether the pod needs the fence.
func (n FenceNeed) Needed() bool {
	return n.Any || n.StatefulSet || n.Selector != "" || len(n.RWOClaims) > 0
}

// String says why, e.g. "StatefulSet pod with ReadWriteOnce volume data-postgres-0", "pod
// matching tier=data".
func (n FenceNeed) String() string {
	if !n.Needed() {
		return "needs no fence"
	}
	if n.Any {
		return "a pod the fence would delete (the policy names no workloads)"
	}
	head := "pod"
	if n.StatefulSet {
		head = "StatefulSet pod"
	}
	if n.Selector != "" {
		head += " matching " + n.Selector
	}
	switch len(n.RWOClaims) {
	case 0:
		return head
	case 1:
		return head + " with ReadWriteOnce volume " + n.RWOClaims[0]
	}
	return head + " with ReadWriteOnce volumes " + strings.Join(n.RWOClaims, ", ")
}

// NeedsFence says whether, and why, the pod needs its node fenced. A finished pod never does,
// nor one that tolerates the out-of-service taint (the fence does not delete it). Without
// workloads every other pod does; with them, a pod of one of the kinds they name. Its claims are
// read through claims only under rwoVolumes; one that cannot be read is an error, unless the pod
// needs the fence anyway (then it is left out of RWOClaims).
func (r WorkloadRule) NeedsFence(pod *corev1.Pod, claims ClaimModes) (FenceNeed, error) {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || ToleratesOutOfService(pod.Spec.Tolerations) {
		return FenceNeed{}, nil
	}
	w := r.workloads
	if w == nil {
		return FenceNeed{Any: true}, nil
	}
	var n FenceNeed
	if ref := metav1.GetControllerOf(pod); w.StatefulSets && ref != nil && ref.Kind == "StatefulSet" && strings.HasPrefix(ref.APIVersion, appsv1.GroupName+"/") {
		n.StatefulSet = true
	}
	if r.selector != nil && r.selector.Matches(labels.Set(pod.Labels)) {
		n.Selector = metav1.FormatLabelSelector(w.PodSelector)
	}
	if !w.RWOVolumes {
		return n, nil
	}
	rwo, err := rwoClaims(pod, claims)
	n.RWOClaims = rwo
	if err != nil && !n.Needed() {
		return FenceNeed{}, err
	}
	return n, nil
}

// rwoClaims names the pod's claims (named, or its generic ephemeral volumes') that one node at
// most may attach; those that do not exist are skipped.
func rwoClaims(pod *corev1.Pod, claims ClaimModes) ([]string, error) {
	var out []string
	var firstErr error
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil:
			if singleNode(v.Ephemeral.VolumeClaimTemplate.Spec.AccessModes) {
				out = append(out, pod.Name+"-"+v.Name) // the claim Kubernetes makes for it
			}
		case v.PersistentVolumeClaim != nil:
			name := v.PersistentVolumeClaim.ClaimName
			modes, err := claims(pod.Namespace, name)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				if firstErr == nil {
					firstErr = fmt.Errorf("reading claim %s/%s of pod %s: %w", pod.Namespace, name, pod.Name, err)
				}
			case singleNode(modes):
				out = append(out, name)
			}
		}
	}
	return out, firstErr
}

// singleNode says whether the access modes let one node at most attach the volume.
func singleNode(modes []corev1.PersistentVolumeAccessMode) bool {
	if len(modes) == 0 {
		return false
	}
	for _, m := range modes {
		if m != corev1.ReadWriteOnce && m != corev1.ReadWriteOncePod {
			return false
		}
	}
	return true
}

// ToleratesOutOfService says whether a pod with these tolerations tolerates the out-of-service
// taint a fence sets: the fence does not delete such a pod, as Kubernetes does not.
func ToleratesOutOfService(ts []corev1.Toleration) bool {
	taint := corev1.Taint{Key: TaintOutOfService, Value: TaintOutOfServiceValue, Effect: corev1.TaintEffectNoExecute}
	for i := range ts {
		if ts[i].ToleratesTaint(logr.Discard(), &taint, false) {
			return true
		}
	}
	return false
}
