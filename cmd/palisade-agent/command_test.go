package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
)

// TestCommanderRunsEachIDOnce: a command ID is carried out once; a new ID waits while another
// command runs.
func TestCommanderRunsEachIDOnce(t *testing.T) {
	c := newCommander(options{executorTimeout: time.Second}, logr.Discard())
	ctx := context.Background()
	c.handle(ctx, agentwire.Command{ID: "a", Action: agentwire.ActionTerminate})
	c.wg.Wait()
	first := c.status()
	if first == nil || first.ID != "a" || first.State != agentwire.ExecutorFailed || first.Message != errNoRuntime.Error() {
		t.Fatalf("status %+v, want a Failed: no runtime configured", first)
	}
	c.handle(ctx, agentwire.Command{ID: "a", Action: agentwire.ActionTerminate})
	c.wg.Wait()
	if again := c.status(); !again.StartedAt.Equal(first.StartedAt) {
		t.Errorf("command a ran again: %+v", again)
	}
	c.mu.Lock()
	c.busy = "other" // a command still running
	c.mu.Unlock()
	c.handle(ctx, agentwire.Command{ID: "b", Action: agentwire.ActionTerminate})
	if st := c.status(); st.ID != "a" || c.seen["b"] {
		t.Errorf("command b started while another ran: %+v", st)
	}
	c.mu.Lock()
	c.busy = ""
	c.mu.Unlock()
	c.handle(ctx, agentwire.Command{ID: "b", Action: agentwire.ActionTerminate})
	c.wg.Wait()
	if st := c.status(); st.ID != "b" || st.State != agentwire.ExecutorFailed {
		t.Errorf("command b once free: %+v", st)
	}
}

// TestFindExecutor: --executor-binary with a slash is taken as it is (if it exists), a bare name is looked up
// in $PATH, and "" means palisade-executor next to the agent's own executable (here the test
// binary's, where there is none), else in $PATH; when none is found, the error says what to do.
func TestFindExecutor(t *testing.T) {
	dir := t.TempDir()
	onPath := filepath.Join(dir, executorName)
	if err := os.WriteFile(onPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	for _, tc := range []struct{ flag, want string }{
		{onPath, onPath},
		{executorName, onPath},
		{"", onPath},
	} {
		if got, err := findExecutor(tc.flag); err != nil || got != tc.want {
			t.Errorf("findExecutor(%q) = %q, %v; want %q", tc.flag, got, err, tc.want)
		}
	}
	t.Setenv("PATH", t.TempDir())
	for _, tc := range []struct{ flag, want string }{
		{executorName, "check --executor-binary"},
		{"/opt/palisade/bin/palisade-executor", "check --executor-binary"},
		{"", "is neither next to the agent"},
	} {
		if _, err := findExecutor(tc.flag); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("findExecutor(%q) without one: %v, want an error saying %q", tc.flag, err, tc.want)
		}
	}
}
