package child

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/providers/executor/protocol"
)

// Result is what a Terminate command did.
type Result struct {
	Pods, Containers int
	// GraceCuts are the pods whose grace period the executor cut to fit the command's time
	// limit.
	GraceCuts []protocol.GraceCut
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
// with its own grace period capped by grace and from its spec in pods when it is there; read
// every pod back; and sweep the whole runtime (providers/executor/node says how). pods must fit
// protocol.MaxPodsBytes (FitPods). command names the order in the executor's logs. It returns a
// nil error only when the executor answered without one; a failure of the executor process
// itself (it ended, hung past ctx's deadline, or wrote garbage) is an error too.
func TerminateAll(ctx context.Context, p *Process, command string, grace *int64, pods []protocol.Pod) (Result, error) {
	deadline, _ := ctx.Deadline()
	resp, err := p.Call(ctx, protocol.Request{Op: protocol.OpTerminate, Deadline: deadline, Command: command,
		GracePeriodSeconds: grace, Pods: pods}, AnswerGrace)
	return Result{Pods: resp.Pods, Containers: resp.Containers, GraceCuts: resp.GraceCuts}, err
}

// FitPods keeps, of the pod specs the agent kept, what fits protocol.MaxPodsBytes of a request,
// in their order, leaving out the largest first; left names those left out (namespace/name),
// which the executor then restores from the runtime's labels.
func FitPods(pods []protocol.Pod) (fit []protocol.Pod, left []string) {
	sizes := make([]int, len(pods))
	total := 2 // the brackets
	for i, p := range pods {
		raw, err := json.Marshal(p)
		if err != nil {
			sizes[i] = protocol.MaxPodsBytes + 1 // never fits
		} else {
			sizes[i] = len(raw) + 1 // and its comma
		}
		total += sizes[i]
	}
	if total <= protocol.MaxPodsBytes {
		return pods, nil
	}
	bySize := make([]int, len(pods))
	for i := range bySize {
		bySize[i] = i
	}
	sort.SliceStable(bySize, func(a, b int) bool { return sizes[bySize[a]] < sizes[bySize[b]] })
	keep := make([]bool, len(pods))
	used := 2
	for _, i := range bySize {
		if used+sizes[i] <= protocol.MaxPodsBytes {
			keep[i], used = true, used+sizes[i]
		}
	}
	for i, p := range pods {
		if keep[i] {
			fit = append(fit, p)
		} else {
			left = append(left, p.Metadata.Namespace+"/"+p.Metadata.Name)
		}
	}
	return fit, left
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
