package child

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/providers/executor/protocol"
)

// checkGoneProcess checks that pid is no process any more (the client reaped it).
func checkGoneProcess(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
	t.Errorf("executor process %d still exists", pid)
}

// fakeExecutor writes a shell script standing in for palisade-executor.
func fakeExecutor(t *testing.T, script string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fake-executor")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// answering is a fake executor that answers every request with success: protocol version 1, a
// read-back of 0.
const answering = `while read -r line; do
	id=$(echo "$line" | sed 's/.*"id":\([0-9]*\).*/\1/')
	echo "{\"id\":$id,\"version\":1,\"running\":0}"
done`

// TestChildCallWithoutTime: a call whose context has expired sends nothing and leaves the
// executor running and usable; closing it ends it.
func TestChildCallWithoutTime(t *testing.T) {
	t.Parallel()
	p, err := Start(fakeExecutor(t, answering), nil, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	expired, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	if _, err := p.Call(expired, protocol.Request{Op: protocol.OpReadBack}, AnswerGrace); !errors.Is(err, context.DeadlineExceeded) || !p.Alive() {
		t.Errorf("call without time: %v, alive %v; want the context's error and the executor still alive", err, p.Alive())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := p.Call(ctx, protocol.Request{Op: protocol.OpReadBack}, 0); err != nil || resp.Running == nil || *resp.Running != 0 {
		t.Errorf("call after it: %+v, %v; want a read-back of 0", resp, err)
	}
	p.Close(5 * time.Second)
	if p.Alive() || p.err == nil || p.err.Error() != "the agent is stopping" {
		t.Errorf("after close: alive %v, error %v", p.Alive(), p.err)
	}
	checkGoneProcess(t, p.cmd.Process.Pid)
}
