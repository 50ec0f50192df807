package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/executor/protocol"
)

// errNoRuntime answers a Terminate command on an agent started without --cri-endpoint.
var errNoRuntime = errors.New("no runtime configured")

// commander carries out the controller's commands in the background, one at a time and each
// command ID at most once, and keeps the status the heartbeats report.
type commander struct {
	o   options
	log logr.Logger
	// changed gets a token when the status changes, so that a heartbeat reports it at once.
	changed chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	seen    map[string]bool // command IDs started
	busy    string          // ID of the command running, "" when none
	current *agentwire.ExecutorStatus

	// exec runs the palisade-executor child process, started on the first command that needs
	// the runtime.
	exec *executorClient
}

func newCommander(o options, log logr.Logger) *commander {
	log = log.WithName("executor")
	if o.criEndpoint != "" {
		if _, err := findExecutor(o.executorBinary); err != nil {
			log.Error(err, "WARNING: a Terminate command or a self-fence would fail")
		}
	}
	return &commander{o: o, log: log, changed: make(chan struct{}, 1), seen: map[string]bool{}, exec: newExecutorClient(o, log)}
}

// status is a copy of the latest command's status, nil before the first command.
func (c *commander) status() *agentwire.ExecutorStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current == nil {
		return nil
	}
	st := *c.current
	return &st
}

// handle starts cmd in the background unless its ID was started before; while another command
// runs, it is left for a later heartbeat (the controller sends it until it clears it).
func (c *commander) handle(ctx context.Context, cmd agentwire.Command) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[cmd.ID] {
		return
	}
	if c.busy != "" {
		c.log.V(1).Info("command waits for the one running", "command", cmd.ID, "running", c.busy)
		return
	}
	c.seen[cmd.ID], c.busy = true, cmd.ID
	c.current = &agentwire.ExecutorStatus{ID: cmd.ID, State: agentwire.ExecutorRunning, StartedAt: time.Now()}
	c.notify()
	c.log.Info("command received", "command", cmd.ID, "action", cmd.Action, "gracePeriodSeconds", cmd.GracePeriodSeconds)
	c.wg.Go(func() { c.run(ctx, cmd) })
}

// run carries cmd out and records how it ended.
func (c *commander) run(ctx context.Context, cmd agentwire.Command) {
	res, err := c.execute(ctx, cmd)
	c.mu.Lock()
	defer c.mu.Unlock()
	st := *c.current
	st.State, st.Pods, st.Containers, st.FinishedAt = agentwire.ExecutorConfirmed, res.pods, res.containers, time.Now()
	if err != nil {
		st.State, st.Message = agentwire.ExecutorFailed, agentwire.TruncateMessage(err.Error())
		c.log.Error(err, "command failed", "command", cmd.ID, "pods", res.pods, "containers", res.containers)
	} else {
		c.log.Info("command confirmed", "command", cmd.ID, "pods", res.pods, "containers", res.containers,
			"took", st.FinishedAt.Sub(st.StartedAt).String())
	}
	c.current, c.busy = &st, ""
	c.notify()
}

// execute checks the command, has the executor child process connect to the runtime, stops
// the kubelet and has the executor terminate every pod. Only a nil error reports Confirmed, and
// the executor answers without an error only after reading every pod back as exited.
func (c *commander) execute(ctx context.Context, cmd agentwire.Command) (result, error) {
	if err := cmd.Validate(); err != nil {
		return result{}, err
	}
	if c.o.criEndpoint == "" {
		return result{}, errNoRuntime
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.o.executorTimeout,
		fmt.Errorf("executor timeout (%s) expired", c.o.executorTimeout))
	defer cancel()
	p, err := c.exec.get(ctx)
	if err != nil {
		return result{}, err
	}
	if c.o.faultConfirmEarly {
		// A lying executor on an otherwise working agent: the runtime is connected (so the
		// heartbeats' read-back goes on), but nothing is terminated.
		c.log.Info("FAULT INJECTION: reporting Confirmed without terminating anything", "command", cmd.ID)
		return result{}, nil
	}
	if err := stopKubelet(ctx, c.o.kubeletStopCommand, c.log); err != nil {
		return result{}, err
	}
	res, err := terminateAll(ctx, p, cmd)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	return res, err
}

// readBack counts the workload containers the runtime lists as not exited, for every heartbeat
// once the executor is connected: the controller's confirmation, independent of the executor's
// own account. It waits at most half the time left to ctx's deadline (half an interval without
// one), so that a slow or hung executor leaves the heartbeat the time to be sent. nil when no
// executor is connected or it does not answer in time.
func (c *commander) readBack(ctx context.Context) *int {
	p := c.exec.running()
	if p == nil {
		return nil
	}
	limit := c.o.interval / 2
	if deadline, ok := ctx.Deadline(); ok {
		limit = time.Until(deadline) / 2
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	deadline, _ := ctx.Deadline()
	resp, err := p.call(ctx, protocol.Request{Op: protocol.OpReadBack, Deadline: deadline}, 0)
	if err == nil && resp.Running == nil {
		err = errors.New("the executor answered without a count")
	}
	if err != nil {
		c.log.Error(err, "reading the runtime back")
		return nil
	}
	return resp.Running
}

// notify signals a status change without blocking; c.mu is held.
func (c *commander) notify() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// close waits for the command running (its context is cancelled by then) and stops the
// executor child process.
func (c *commander) close() {
	c.wg.Wait()
	c.exec.close()
}
