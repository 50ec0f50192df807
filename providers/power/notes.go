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
// puts them on its step's message; outside such a call (WithNotes), NotIdentified does nothing.
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

// NotIdentified notes, on the fence step whose call ctx belongs to, that its power command went
// without the machine's identity compared, and why (format and args); the same note once.
func NotIdentified(ctx context.Context, format string, args ...any) {
	n, _ := ctx.Value(notesKey{}).(*Notes)
	if n == nil {
		return
	}
	msg := "not checked that it controls the node's machine: " + fmt.Sprintf(format, args...) +
		" (the verify window is what catches a node that runs on after its fence)"
	n.mu.Lock()
	defer n.mu.Unlock()
	if !slices.Contains(n.list, msg) {
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
