package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/executor/protocol"
)

// result is what a Terminate command did.
type result struct {
	pods, containers int
}

// stopKubelet runs the --kubelet-stop-command line with /bin/sh -c, so that nothing restarts
// the pods once they are terminated.
func stopKubelet(ctx context.Context, line string, log logr.Logger) error {
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

// terminateAll has the executor p terminate every pod on the runtime but the agent's own
// (--pod-uid, given to the executor when it started), all at once, each by the kubelet's rules
// with its own grace period capped by cmd's; read every pod back; and sweep the whole runtime
// (palisade-executor's doc comment says how). It returns a nil error only when the executor
// answered without one; a failure of the executor process itself (it ended, hung past ctx's
// deadline, or wrote garbage) is an error too.
func terminateAll(ctx context.Context, p *childProcess, cmd agentwire.Command) (result, error) {
	deadline, _ := ctx.Deadline()
	resp, err := p.call(ctx, protocol.Request{Op: protocol.OpTerminate, Deadline: deadline, Command: cmd.ID,
		GracePeriodSeconds: cmd.GracePeriodSeconds}, answerGrace)
	return result{pods: resp.Pods, containers: resp.Containers}, err
}
