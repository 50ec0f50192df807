package power

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// A call's notes are what a Switch's command did not do that the fence's record must say,
// although the command went: that the machine's identity was not checked, and why. Fencer.Fence
// puts them on its step's message; outside such a call (WithNotes), Note does nothing.
type notesKey struct{}

// Notes collects a call's notes (WithNotes).
type Notes struct {
	mu   sync.Mutex
	list []string
}

// WithNotes returns ctx collecting the notes of the calls made with it.
func WithNotes(ctx context.Context) (context.Context, *Notes) {
	n := &Notes{}
	return context.WithValue(ctx, notesKey{}, n), n
}

// Note records a note on the fence step whose call ctx belongs to; the same note once.
func Note(ctx context.Context, format string, args ...any) {
	n, _ := ctx.Value(notesKey{}).(*Notes)
	if n == nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	n.mu.Lock()
	defer n.mu.Unlock()
	if msg != "" && !slices.Contains(n.list, msg) {
		n.list = append(n.list, msg)
	}
}

// String is the notes, each after "; ".
func (n *Notes) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var b strings.Builder
	for _, m := range n.list {
		b.WriteString("; ")
		b.WriteString(m)
	}
	return b.String()
}

// NotIdentified is the note of a power command sent without checking that the power
// controller is the node's machine's, for the reason why.
func NotIdentified(why string) string {
	return "not checked that it controls the node's machine: " + why + " (the verify window is what catches a node that runs on after its fence)"
}
