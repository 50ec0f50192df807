package app

import (
	"slices"

	"github.com/go-logr/logr"
)

// LazyValues returns log with its WithValues deferred to the lines actually written.
// controller-runtime gives every reconcile a logger with the request's keys (the object, its
// name, a reconcile ID), a node's Lease renewal makes one reconcile, and almost none of them
// writes a line; zap encodes the keys of a WithValues at once, which at 5000 nodes took about
// 1 % of a core (make bench-scale's CPU profile). The lines written are the same: the
// deferred keys come first, in order, then the line's own.
func LazyValues(log logr.Logger) logr.Logger {
	sink := log.GetSink()
	if s, ok := sink.(logr.CallDepthLogSink); ok {
		sink = s.WithCallDepth(1) // the lazy sink's own frame
	}
	return logr.New(&lazySink{sink: sink})
}

// lazySink keeps the keys and values of WithValues until a line is written.
type lazySink struct {
	sink logr.LogSink
	kvs  []any
}

// Init does nothing: the wrapped sink was initialised by its own logger, and LazyValues added
// this sink's frame to its call depth.
func (l *lazySink) Init(logr.RuntimeInfo) {}

func (l *lazySink) Enabled(level int) bool { return l.sink.Enabled(level) }

func (l *lazySink) Info(level int, msg string, kvs ...any) {
	l.sink.Info(level, msg, slices.Concat(l.kvs, kvs)...)
}

func (l *lazySink) Error(err error, msg string, kvs ...any) {
	l.sink.Error(err, msg, slices.Concat(l.kvs, kvs)...)
}

func (l *lazySink) WithValues(kvs ...any) logr.LogSink {
	return &lazySink{sink: l.sink, kvs: slices.Concat(l.kvs, kvs)}
}

func (l *lazySink) WithName(name string) logr.LogSink {
	return &lazySink{sink: l.sink.WithName(name), kvs: l.kvs}
}

// WithCallDepth keeps call-site attribution right for sinks that record it.
func (l *lazySink) WithCallDepth(depth int) logr.LogSink {
	if s, ok := l.sink.(logr.CallDepthLogSink); ok {
		return &lazySink{sink: s.WithCallDepth(depth), kvs: l.kvs}
	}
	return l
}
