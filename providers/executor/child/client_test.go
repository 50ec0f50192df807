package child

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindExecutor: --executor-binary with a slash is taken as it is (if it exists), a bare name is looked up
// in $PATH, and "" means palisade-executor next to the agent's own executable (here the test
// binary's, where there is none), else in $PATH; when none is found, the error says what to do.
func TestFindExecutor(t *testing.T) {
	dir := t.TempDir()
	onPath := filepath.Join(dir, ExecutorName)
	if err := os.WriteFile(onPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	for _, tc := range []struct{ flag, want string }{
		{onPath, onPath},
		{ExecutorName, onPath},
		{"", onPath},
	} {
		if got, err := Find(tc.flag); err != nil || got != tc.want {
			t.Errorf("Find(%q) = %q, %v; want %q", tc.flag, got, err, tc.want)
		}
	}
	t.Setenv("PATH", t.TempDir())
	for _, tc := range []struct{ flag, want string }{
		{ExecutorName, "check --executor-binary"},
		{"/opt/palisade/bin/palisade-executor", "check --executor-binary"},
		{"", "is neither next to the agent"},
	} {
		if _, err := Find(tc.flag); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Find(%q) without one: %v, want an error saying %q", tc.flag, err, tc.want)
		}
	}
}
