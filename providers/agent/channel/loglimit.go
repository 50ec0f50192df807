package channel

import (
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// linesPerSecond is how many lines of one message lineLimit lets through a second.
const linesPerSecond = 20

// lineLimit bounds the lines the server writes about what thousands of agents do at once (a
// reconnection storm fails thousands of TLS handshakes in a second), one message at a time: each
// message passes at most linesPerSecond times a second, and the lines it holds back are counted and
// reported once, when their second is over ("held back" and the count), so that no line goes
// missing unaccounted (but for a report still due when the process exits). Lines about a node's
// state (its first heartbeat, a reboot, an executor status) do not go through it: they come once
// per event and are always written.
//
// The controller's logger itself does not sample (zap's production sampling dropped lines with
// no trace, "first heartbeat from node" among them, when 5000 agents started at once).
type lineLimit struct {
	log logr.Logger
	per int
	now func() time.Time
	// after runs a function once a duration has passed (time.AfterFunc; a test's own).
	after func(time.Duration, func())
	mu    sync.Mutex
	// windows is, by message, the second under way (its start, its lines, those held back).
	windows map[string]*lineWindow
}

type lineWindow struct {
	start   time.Time
	written int
	held    int
}

func newLineLimit(log logr.Logger, perSecond int) *lineLimit {
	after := func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	return &lineLimit{log: log, per: perSecond, now: time.Now, after: after, windows: map[string]*lineWindow{}}
}

// Info writes the line unless its message has used up its second.
func (l *lineLimit) Info(msg string, kvs ...any) {
	now := l.now()
	l.mu.Lock()
	w := l.windows[msg]
	if w == nil || now.Sub(w.start) >= time.Second {
		w = &lineWindow{start: now}
		l.windows[msg] = w
	}
	if w.written < l.per {
		w.written++
		l.mu.Unlock()
		l.log.Info(msg, kvs...)
		return
	}
	w.held++
	first := w.held == 1
	l.mu.Unlock()
	if first {
		l.after(w.start.Add(time.Second).Sub(now), func() { l.report(msg, w) })
	}
}

// report writes how many lines of msg were held back in w's second, and ends the second.
func (l *lineLimit) report(msg string, w *lineWindow) {
	l.mu.Lock()
	held, written := w.held, w.written
	if l.windows[msg] == w {
		delete(l.windows, msg)
	}
	l.mu.Unlock()
	l.log.Info(msg+" (more lines held back)", "heldBack", held, "written", written,
		"since", w.start.UTC().Format(time.RFC3339Nano))
}
