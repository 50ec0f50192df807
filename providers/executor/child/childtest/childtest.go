// Package childtest holds test helpers for the agent's executor child process: a shell script
// standing in for palisade-executor (a child that misbehaves in ways the real one does not),
// and a check that a child was reaped. Tests only.
package childtest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Answering is a fake executor that answers every request with success: protocol version 2, a
// read-back of 0.
const Answering = `while read -r line; do
	id=$(echo "$line" | sed 's/.*"id":\([0-9]*\).*/\1/')
	echo "{\"id\":$id,\"version\":2,\"running\":0}"
done`

// FakeExecutor writes script, run by /bin/sh, as a stand-in for palisade-executor and returns
// its path.
func FakeExecutor(t *testing.T, script string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fake-executor")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// CheckGone checks that pid is no process any more (its parent reaped it) within 5 s.
func CheckGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
	t.Errorf("executor process %d still exists", pid)
}
