package app

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// TestLazyValuesWritesTheSameLines: through LazyValues, a zap logger writes byte for byte what
// it writes directly (keys in order, names, levels, errors, call sites, helpers that add call
// depth), while a WithValues allocates less than zap's.
func TestLazyValuesWritesTheSameLines(t *testing.T) {
	newZap := func(buf *bytes.Buffer) logr.Logger {
		cfg := zap.NewProductionEncoderConfig()
		cfg.TimeKey = "" // the only field that may differ
		core := zapcore.NewCore(zapcore.NewJSONEncoder(cfg), zapcore.AddSync(buf), zapcore.Level(-2))
		return zapr.NewLogger(zap.New(core, zap.AddCaller()))
	}
	helper := func(l logr.Logger) {
		l.WithCallDepth(1).Info("from a helper")
	}
	emit := func(log logr.Logger) {
		l := log.WithName("node").WithValues("Node", klog.KRef("", "n1"), "reconcileID", "r1")
		l.Info("first", "step", 1)
		l.WithValues("extra", true).WithName("sub").V(2).Info("verbose", "step", 2)
		l.V(3).Info("not written")
		l.Error(errors.New("boom"), "failed", "k", "v")
		logr.FromContextOrDiscard(logr.NewContext(context.Background(), l.WithValues("ctx", 1))).Info("through a context")
		helper(l)
	}
	var direct, lazy bytes.Buffer
	emit(newZap(&direct))
	emit(LazyValues(newZap(&lazy)))
	if direct.String() != lazy.String() {
		t.Errorf("lines differ:\ndirect:\n%s\nlazy:\n%s", direct.String(), lazy.String())
	}
	if n := strings.Count(direct.String(), "\n"); n != 5 {
		t.Errorf("%d lines written, want 5:\n%s", n, direct.String())
	}
	for _, want := range []string{`"Node":{"name":"n1"}`, `"reconcileID":"r1"`, `"extra":true`, `"logger":"node.sub"`, "lazylog_test.go"} {
		if !strings.Contains(lazy.String(), want) {
			t.Errorf("the lines lack %s:\n%s", want, lazy.String())
		}
	}

	plain, deferred := newZap(&bytes.Buffer{}), LazyValues(newZap(&bytes.Buffer{}))
	withValues := func(l logr.Logger) func() {
		return func() { _ = l.WithValues("Node", klog.KRef("", "n1"), "namespace", "", "name", "n1") }
	}
	if a, b := testing.AllocsPerRun(100, withValues(deferred)), testing.AllocsPerRun(100, withValues(plain)); a >= b {
		t.Errorf("a lazy WithValues allocates %.0f times, zap's %.0f: no saving", a, b)
	}
}
