package v1alpha1

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
