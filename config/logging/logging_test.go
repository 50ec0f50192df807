package logging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestLoggerDoesNotSample: the binaries' logger writes every line of a message repeated far
// more than zap's production sampling lets through (the first 100 a second, then one in 100).
func TestLoggerDoesNotSample(t *testing.T) {
	file := filepath.Join(t.TempDir(), "log")
	cfg := Config(0)
	cfg.OutputPaths = []string{file}
	zl, err := cfg.Build()
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		zl.Info("first heartbeat from node", // the same message from every agent
			zap.Int("i", i))
	}
	_ = zl.Sync()
	out, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(out), `"msg":"first heartbeat from node"`); got != n {
		t.Errorf("%d of %d lines written", got, n)
	}
}
