package child

import (
	"context"
	"errors"
	"testing"
	"time"

	"palisade.dev/palisade/providers/executor/child/childtest"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/providers/executor/protocol"
)

// TestChildCallWithoutTime: a call whose context has expired sends nothing and leaves the
// executor running and usable; closing it ends it.
func TestChildCallWithoutTime(t *testing.T) {
	t.Parallel()
	p, err := Start(childtest.FakeExecutor(t, childtest.Answering), nil, logr.Discard())
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
	childtest.CheckGone(t, p.cmd.Process.Pid)
}
