package child

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/providers/executor/protocol"
)

// Result is what a Terminate command did.
type Result struct {
	Pods, Containers int
}

// StopKubelet runs the --kubelet-stop-command line with /bin/sh -c, so that nothing restarts
// the pods once they are terminated.
func StopKubelet(ctx context.Context, line string, log logr.Logger) error {
	if line == "" {
		return nil
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second // a child left holding the output does not hold us
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 512 {
			msg = "…" + msg[len(msg)-512:]
		}
		return fmt.Errorf("kubelet stop command %q failed: %w: %s", line, err, msg)
	}
	log.Info("kubelet stopped", "command", line)
	return nil
}

// TerminateAll has the executor p terminate every pod on the runtime but the agent's own
// (--pod-uid, given to the executor when it started), all at once, each by the kubelet's rules
// with its own grace period capped by grace; read every pod back; and sweep the whole runtime
// (providers/executor/node says how). command names the order in the executor's logs. It
// returns a nil error only when the executor answered without one; a failure of the executor
// process itself (it ended, hung past ctx's deadline, or wrote garbage) is an error too.
func TerminateAll(ctx context.Context, p *Process, command string, grace *int64) (Result, error) {
	deadline, _ := ctx.Deadline()
	resp, err := p.Call(ctx, protocol.Request{Op: protocol.OpTerminate, Deadline: deadline, Command: command,
		GracePeriodSeconds: grace}, AnswerGrace)
	return Result{Pods: resp.Pods, Containers: resp.Containers}, err
}

// ReadBack counts the workload containers the runtime lists as not exited, within ctx.
func ReadBack(ctx context.Context, p *Process) (*int, error) {
	deadline, _ := ctx.Deadline()
	resp, err := p.Call(ctx, protocol.Request{Op: protocol.OpReadBack, Deadline: deadline}, 0)
	if err == nil && resp.Running == nil {
		err = errors.New("the executor answered without a count")
	}
	return resp.Running, err
}
