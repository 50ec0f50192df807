package orders

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/executor/child"
	"palisade.dev/palisade/providers/executor/protocol"
)

// ErrNoRuntime answers a Terminate command on an agent started without --cri-endpoint.
var ErrNoRuntime = errors.New("no runtime configured")

// Config is how the agent carries orders out.
type Config struct {
	// Executor is the palisade-executor child process to start; without a CRIEndpoint every
	// order fails with "no runtime configured".
	Executor child.Config
	// Timeout bounds one order (--executor-timeout).
	Timeout time.Duration
	// KubeletStopCommand runs with /bin/sh -c before terminating; "" runs none.
	KubeletStopCommand string
	// ReadBackWait: a read-back without a deadline waits at most half of it (the interval).
	ReadBackWait time.Duration
	// FaultConfirmEarly reports Confirmed without terminating: testing only.
	FaultConfirmEarly bool
	// StateDir holds the highest fencing token the agent took (TokenFile), so that it refuses
	// an older fence's orders after a restart too; "" keeps it in memory only.
	StateDir string
	// BootID is the boot ID of the machine the agent runs in, carried in every status it
	// reports (ExecutorStatus.BootID); "" when unknown.
	BootID string
	// PodSpecs, when set, returns the specs the agent kept of its node's pods (podspecs), which
	// every Terminate hands to the executor; nil: the executor restores every pod from the
	// runtime's labels.
	PodSpecs func() []protocol.Pod
}

// Commander carries out the controller's commands in the background, one at a time and each
// command ID at most once, and keeps the status the heartbeats report.
type Commander struct {
	o   Config
	log logr.Logger
	// changed gets a token when the status changes, so that a heartbeat reports it at once.
	changed chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	seen    map[string]bool // command IDs started or refused
	tokens  *tokenStore
	busy    string // ID of the command running, "" when none
	current *agentwire.ExecutorStatus

	// exec runs the palisade-executor child process, started on the first command that needs
	// the runtime.
	exec *child.Client
}

// NewCommander returns a Commander that starts the executor on the first order that needs it.
func NewCommander(o Config, log logr.Logger) *Commander {
	log = log.WithName("executor")
	if o.Executor.CRIEndpoint != "" {
		if _, err := child.Find(o.Executor.Binary); err != nil {
			log.Error(err, "WARNING: a Terminate command or a self-fence would fail")
		}
	}
	tokens := loadTokens(o.StateDir)
	switch {
	case tokens.broken != nil:
		log.Error(tokens.broken, "WARNING: every order will be refused")
	case o.StateDir == "":
		log.Info("WARNING: no --state-dir: the highest fencing token taken is kept in memory only, so an agent restarted between two fences would carry out a late order of the older one")
	case tokens.highest > 0:
		log.Info("orders with an older fencing token will be refused", "fencingToken", tokens.highest)
	}
	return &Commander{o: o, log: log, changed: make(chan struct{}, 1), seen: map[string]bool{}, tokens: tokens, exec: child.New(o.Executor, log)}
}

// FencingToken is the highest fencing token the agent took.
func (c *Commander) FencingToken() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokens.highest
}

// Status is a copy of the latest command's status, nil before the first command.
func (c *Commander) Status() *agentwire.ExecutorStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current == nil {
		return nil
	}
	st := *c.current
	st.BootID = c.o.BootID // the agent's boot is the order's: it runs orders in its own process
	return &st
}

// Handle starts cmd in the background unless its ID was started before; while another command
// runs, it is left for a later heartbeat (the controller sends it until it clears it).
func (c *Commander) Handle(ctx context.Context, cmd agentwire.Command) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[cmd.ID] {
		return
	}
	if c.busy != "" {
		c.log.V(1).Info("command waits for the one running", "command", cmd.ID, "running", c.busy)
		return
	}
	c.seen[cmd.ID] = true
	err := cmd.Validate()
	if err == nil {
		err = c.tokens.take(cmd)
	}
	if err != nil {
		c.refuse(cmd, err)
		return
	}
	c.busy = cmd.ID
	c.current = &agentwire.ExecutorStatus{ID: cmd.ID, State: agentwire.ExecutorRunning, StartedAt: time.Now()}
	c.notify()
	c.log.Info("command received", "command", cmd.ID, "action", cmd.Action, "gracePeriodSeconds", cmd.GracePeriodSeconds, "fencingToken", cmd.Token)
	c.wg.Go(func() { c.run(ctx, cmd) })
}

// refuse reports cmd Failed without carrying it out; c.mu is held.
func (c *Commander) refuse(cmd agentwire.Command, err error) {
	now := time.Now()
	st := &agentwire.ExecutorStatus{ID: cmd.ID, State: agentwire.ExecutorFailed, Message: agentwire.TruncateMessage(err.Error()),
		StartedAt: now, FinishedAt: now}
	if r, ok := err.(*refusal); ok {
		st.Reason = r.reason
	}
	c.current = st
	c.notify()
	c.log.Error(err, "command refused", "command", cmd.ID, "fencingToken", cmd.Token, "highestFencingToken", c.tokens.highest)
}

// run carries cmd out and records how it ended.
func (c *Commander) run(ctx context.Context, cmd agentwire.Command) {
	res, kubeletStopped, err := c.execute(ctx, cmd)
	c.mu.Lock()
	defer c.mu.Unlock()
	st := *c.current
	st.State, st.Pods, st.Containers, st.FinishedAt = agentwire.ExecutorConfirmed, res.Pods, res.Containers, time.Now()
	st.KubeletStopped = kubeletStopped
	cuts := graceCutNote(res.GraceCuts, c.o.Timeout)
	st.Message = agentwire.TruncateMessage(cuts)
	if cuts != "" {
		c.log.Info("WARNING: "+cuts+": those pods did not get the grace period the kubelet would have given them", "command", cmd.ID)
	}
	if err != nil {
		msg := err.Error()
		if cuts != "" {
			msg += "; " + cuts
		}
		st.State, st.Message = agentwire.ExecutorFailed, agentwire.TruncateMessage(msg)
		c.log.Error(err, "command failed", "command", cmd.ID, "pods", res.Pods, "containers", res.Containers)
	} else {
		c.log.Info("command confirmed", "command", cmd.ID, "pods", res.Pods, "containers", res.Containers,
			"kubeletStopped", kubeletStopped, "took", st.FinishedAt.Sub(st.StartedAt).String())
	}
	c.current, c.busy = &st, ""
	c.notify()
}

// graceCutNote names the pods whose grace period the executor cut to fit the order's time
// limit, with the grace each had and got: "" for none. The count comes first, so that a message
// truncated still says it.
func graceCutNote(cuts []protocol.GraceCut, timeout time.Duration) string {
	if len(cuts) == 0 {
		return ""
	}
	pods := make([]string, len(cuts))
	for i, cut := range cuts {
		pods[i] = fmt.Sprintf("%s cut from %ds to %ds", cut.Pod, cut.From, cut.To)
	}
	count := "1 pod"
	if len(cuts) > 1 {
		count = fmt.Sprintf("%d pods", len(cuts))
	}
	return fmt.Sprintf("the time limit (--executor-timeout %s) cut the grace period of %s: %s",
		timeout, count, strings.Join(pods, ", "))
}

// execute checks the command, has the executor child process connect to the runtime (which
// fails, before anything is stopped, when the runtime holds no sandbox of the agent's own pod:
// it is not the kubelet's), stops the kubelet and has the executor terminate every pod. Only a nil error reports Confirmed, and
// the executor answers without an error only after reading every pod back as exited.
// kubeletStopped says that the kubelet stop command ran and succeeded.
func (c *Commander) execute(ctx context.Context, cmd agentwire.Command) (res child.Result, kubeletStopped bool, err error) {
	if err := cmd.Validate(); err != nil {
		return child.Result{}, false, err
	}
	if c.o.Executor.CRIEndpoint == "" {
		return child.Result{}, false, ErrNoRuntime
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.o.Timeout,
		fmt.Errorf("executor timeout (%s) expired", c.o.Timeout))
	defer cancel()
	p, err := c.exec.Get(ctx)
	if err != nil {
		return child.Result{}, false, err
	}
	if c.o.FaultConfirmEarly {
		// A lying executor on an otherwise working agent: the runtime is connected (so the
		// heartbeats' read-back goes on), but nothing is terminated.
		c.log.Info("FAULT INJECTION: reporting Confirmed without terminating anything", "command", cmd.ID)
		return child.Result{}, false, nil
	}
	if err := child.StopKubelet(ctx, c.o.KubeletStopCommand, c.log); err != nil {
		return child.Result{}, false, err
	}
	kubeletStopped = c.o.KubeletStopCommand != ""
	res, err = child.TerminateAll(ctx, p, cmd.ID, cmd.GracePeriodSeconds, c.podSpecs(cmd.ID))
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	return res, kubeletStopped, err
}

// podSpecs are the pod specs kept that fit the executor's request (child.FitPods).
func (c *Commander) podSpecs(id string) []protocol.Pod {
	if c.o.PodSpecs == nil {
		return nil
	}
	pods, left := child.FitPods(c.o.PodSpecs())
	if len(left) > 0 {
		c.log.Info("pod specs left out of the executor's request, which they would overflow: those pods are restored from the runtime's labels",
			"command", id, "pods", left)
	}
	return pods
}

// ReadBack counts the workload containers the runtime lists as not exited, for every heartbeat
// once the executor is connected: the controller's confirmation, independent of the executor's
// own account. It waits at most half the time left to ctx's deadline (half an interval without
// one), so that a slow or hung executor leaves the heartbeat the time to be sent. nil when no
// executor is connected or it does not answer in time.
func (c *Commander) ReadBack(ctx context.Context) *int {
	p := c.exec.Running()
	if p == nil {
		return nil
	}
	limit := c.o.ReadBackWait / 2
	if deadline, ok := ctx.Deadline(); ok {
		limit = time.Until(deadline) / 2
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	running, err := child.ReadBack(ctx, p)
	if err != nil {
		c.log.Error(err, "reading the runtime back")
		return nil
	}
	return running
}

// notify signals a status change without blocking; c.mu is held.
func (c *Commander) notify() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Changed gets a token when the status changes, so that a heartbeat reports it at once.
func (c *Commander) Changed() <-chan struct{} { return c.changed }

// Wait waits for the command running, if any, to end.
func (c *Commander) Wait() { c.wg.Wait() }

// Close waits for the command running (its context is cancelled by then) and stops the
// executor child process.
func (c *Commander) Close() {
	c.Wait()
	c.exec.Close()
}

// StartSelfFence starts a self-fence as command id on the Terminate command's executor path,
// then calls after with its final status. It returns false, starting nothing, when a command
// runs or id was started before.
func (c *Commander) StartSelfFence(ctx context.Context, id string, after func(agentwire.ExecutorStatus)) bool {
	cmd := agentwire.Command{ID: id, Action: agentwire.ActionTerminate}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy != "" || c.seen[id] {
		return false
	}
	c.seen[id], c.busy = true, id
	c.current = &agentwire.ExecutorStatus{ID: id, State: agentwire.ExecutorRunning, StartedAt: time.Now()}
	c.notify()
	c.wg.Go(func() {
		c.run(ctx, cmd)
		if st := c.Status(); st != nil && after != nil {
			after(*st)
		}
	})
	return true
}
