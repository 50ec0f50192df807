package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/detectors/agent"
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
	current *agent.ExecutorStatus
	rt      *nodeRuntime // connected on the first command that needs it
}

func newCommander(o options, log logr.Logger) *commander {
	return &commander{o: o, log: log.WithName("executor"), changed: make(chan struct{}, 1), seen: map[string]bool{}}
}

// status is a copy of the latest command's status, nil before the first command.
func (c *commander) status() *agent.ExecutorStatus {
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
func (c *commander) handle(ctx context.Context, cmd agent.Command) {
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
	c.current = &agent.ExecutorStatus{ID: cmd.ID, State: agent.ExecutorRunning, StartedAt: time.Now()}
	c.notify()
	c.log.Info("command received", "command", cmd.ID, "action", cmd.Action, "gracePeriodSeconds", cmd.GracePeriodSeconds)
	c.wg.Go(func() { c.run(ctx, cmd) })
}

// run carries cmd out and records how it ended.
func (c *commander) run(ctx context.Context, cmd agent.Command) {
	res, err := c.execute(ctx, cmd)
	c.mu.Lock()
	defer c.mu.Unlock()
	st := *c.current
	st.State, st.Pods, st.Containers, st.FinishedAt = agent.ExecutorConfirmed, res.pods, res.containers, time.Now()
	if err != nil {
		st.State, st.Message = agent.ExecutorFailed, agent.TruncateMessage(err.Error())
		c.log.Error(err, "command failed", "command", cmd.ID, "pods", res.pods, "containers", res.containers)
	} else {
		c.log.Info("command confirmed", "command", cmd.ID, "pods", res.pods, "containers", res.containers,
			"took", st.FinishedAt.Sub(st.StartedAt).String())
	}
	c.current, c.busy = &st, ""
	c.notify()
}

// execute checks the command, connects to the runtime, stops the kubelet and terminates every
// pod. Only a nil error reports Confirmed, and terminateAll returns nil only after reading every
// pod back as exited.
func (c *commander) execute(ctx context.Context, cmd agent.Command) (result, error) {
	if err := cmd.Validate(); err != nil {
		return result{}, err
	}
	if c.o.criEndpoint == "" {
		return result{}, errNoRuntime
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.o.executorTimeout,
		fmt.Errorf("executor timeout (%s) expired", c.o.executorTimeout))
	defer cancel()
	rt, err := c.runtime(ctx)
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
	res, err := terminateAll(ctx, rt, cmd.GracePeriodSeconds, c.o.podUID, c.log)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	return res, err
}

// runtime connects to the container runtime once; a failed connection is retried by the next
// command. The connection is made on demand, so that an agent never ordered to terminate
// anything does not depend on the runtime.
func (c *commander) runtime(ctx context.Context) (*nodeRuntime, error) {
	c.mu.Lock()
	rt := c.rt
	c.mu.Unlock()
	if rt != nil {
		return rt, nil
	}
	rt, err := connectRuntime(ctx, c.o.criEndpoint)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.rt = rt
	c.mu.Unlock()
	return rt, nil
}

// readBack counts the workload containers the runtime lists as not exited, for every heartbeat
// once the runtime is connected: the controller's confirmation, independent of the executor's
// own account. nil when not connected or the runtime does not answer.
func (c *commander) readBack(ctx context.Context) *int {
	c.mu.Lock()
	rt := c.rt
	c.mu.Unlock()
	if rt == nil {
		return nil
	}
	running, err := runningContainers(ctx, rt.cri, c.o.podUID)
	if err != nil {
		c.log.Error(err, "reading the runtime back")
		return nil
	}
	n := len(running)
	return &n
}

// notify signals a status change without blocking; c.mu is held.
func (c *commander) notify() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// close waits for the command running (its context is cancelled by then) and disconnects.
func (c *commander) close() {
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rt != nil {
		if err := c.rt.Close(); err != nil {
			c.log.Error(err, "closing the runtime connections")
		}
		c.rt = nil
	}
}
