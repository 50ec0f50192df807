// Package logging is the one logger configuration of Palisade's binaries (the controller, the
// node agent and its gateway, the executor): zap's production JSON to stderr, at the `-v`
// verbosity, without sampling. It sits on the lowest floor so that every command can link it;
// it imports zap, zapr and logr alone, within the agent's dependency budget.
package logging

import (
	"fmt"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config is zap's production configuration (JSON to stderr) at verbosity, without its
// sampling. Sampling keeps the first 100 lines of a message a second and then one in 100, with
// no trace of the rest: when 5000 agents started at once, the controller's "first heartbeat
// from node" was missing for about a fifth of them (make bench-scale). The lines that thousands
// of agents or nodes repeat are thinned where they are written instead, and say how many they
// held back (the heartbeat server's lineLimit, the node reconciler's repeats).
func Config(verbosity int) zap.Config {
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(zapcore.Level(-verbosity))
	cfg.Sampling = nil
	return cfg
}

// New builds Config(verbosity)'s logger and returns it with the function that flushes it.
func New(verbosity int) (logr.Logger, func(), error) {
	zl, err := Config(verbosity).Build()
	if err != nil {
		return logr.Discard(), func() {}, fmt.Errorf("building logger: %w", err)
	}
	return zapr.NewLogger(zl), func() { _ = zl.Sync() }, nil
}
