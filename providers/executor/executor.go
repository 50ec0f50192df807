package executor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// Executor terminates pods' containers on a Runtime, by the kubelet's rules.
type Executor struct {
	runtime Runtime
	// PollInterval is how often a signalled container's status is read back (default 20 ms).
	PollInterval time.Duration
	// ExitTimeout is how long a container may take to be read back as exited after SIGKILL
	// before the executor gives up on it (default 10 s).
	ExitTimeout time.Duration
	// HTTPClient runs httpGet preStop hooks (default: TLS not verified, like the kubelet's).
	HTTPClient *http.Client
}

// New returns an Executor for rt.
func New(rt Runtime) *Executor {
	return &Executor{runtime: rt, PollInterval: 20 * time.Millisecond, ExitTimeout: 10 * time.Second}
}

// killMargin is what a grace period leaves before SIGKILL at the latest: it comes up to
// MinimumGracePeriod after the grace period ends (for a hook still running then), and a
// second more covers the fractions of seconds KillAt does not count and the polling.
const killMargin = MinimumGracePeriod + time.Second

// GraceWithin is the longest grace period, in whole seconds, whose SIGKILL and its read-back
// (ExitTimeout) still come before ctx's deadline, counted from now; ok is false when ctx has
// none. It is never below 0, which gives the least a kubelet gives, as for a force deletion:
// SIGKILL 2 s after the stop signal.
func (e *Executor) GraceWithin(ctx context.Context) (seconds int64, ok bool) {
	at, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	return graceWithin(time.Until(at), e.ExitTimeout), true
}

func graceWithin(left, exitTimeout time.Duration) int64 {
	return max(int64((left-exitTimeout-killMargin)/time.Second), 0)
}

// Termination is a termination under way. Its grace period can be shortened while it runs.
type Termination struct {
	e        *Executor
	req      Request
	plan     *Plan
	deadline *Deadline
	// ended has a channel per container name, closed once every container of that name has
	// ended; pending counts those still to end.
	ended   map[string]chan struct{}
	pending map[string]int
	mu      sync.Mutex
	done    chan struct{}
	report  *Report
	err     error
}

// Terminate stops the containers of req and returns once every one of them has been read back
// as exited (and, for a pod termination, its sandboxes stopped), or when ctx ends.
func (e *Executor) Terminate(ctx context.Context, req Request) (*Report, error) {
	t, err := e.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	return t.Wait()
}

// Start begins the termination of req and returns at once; Wait returns its Report.
func (e *Executor) Start(ctx context.Context, req Request) (*Termination, error) {
	plan, err := NewPlan(req)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	uid := string(req.Pod.UID)
	all, err := e.runtime.PodContainers(ctx, uid)
	if err != nil {
		return nil, fmt.Errorf("listing containers of pod %s/%s: %w", req.Pod.Namespace, req.Pod.Name, err)
	}
	t := &Termination{
		e: e, req: req, plan: plan, deadline: NewDeadline(started, plan.GracePeriodSeconds),
		ended: map[string]chan struct{}{}, pending: map[string]int{}, done: make(chan struct{}),
		report: &Report{Pod: req.Pod.Namespace + "/" + req.Pod.Name, PodUID: uid, Reason: plan.Reason, Started: started},
	}
	targets := t.targets(all)
	go t.run(ctx, targets)
	return t, nil
}

// Shorten applies a shorter grace period from now on; a longer one is refused (false).
func (t *Termination) Shorten(graceSeconds int64) bool {
	return t.deadline.Shorten(graceSeconds, time.Now())
}

// Deadline is the termination's grace period.
func (t *Termination) Deadline() *Deadline { return t.deadline }

// Done is closed when the termination has finished.
func (t *Termination) Done() <-chan struct{} { return t.done }

// Wait blocks until the termination has finished and returns its Report, with an error when a
// container could not be confirmed exited.
func (t *Termination) Wait() (*Report, error) {
	<-t.done
	return t.report, t.err
}

type target struct {
	Container
	plan ContainerPlan
}

// targets picks the containers to stop (every one not exited, or the probe's container only)
// and prepares the ordering channels: those of containers with nothing to stop start closed.
func (t *Termination) targets(all []Container) []target {
	var out []target
	for _, c := range all {
		if c.State == StateExited || c.State == StateCreated {
			continue // no process to stop
		}
		if t.plan.Reason != ReasonPodTermination && c.Name != t.req.Container {
			continue
		}
		cp := t.plan.Container(c.Name)
		if cp == nil {
			// Not in the spec (the pod changed): stop it as a main container with no hook.
			cp = &ContainerPlan{Name: c.Name}
		}
		out = append(out, target{Container: c, plan: *cp})
		t.pending[c.Name]++
		if t.ended[c.Name] == nil {
			t.ended[c.Name] = make(chan struct{})
		}
	}
	for _, cp := range t.plan.Containers {
		if t.ended[cp.Name] == nil {
			ch := make(chan struct{})
			close(ch)
			t.ended[cp.Name] = ch
		}
	}
	return out
}

// run stops every target concurrently, then confirms and fills the report.
func (t *Termination) run(ctx context.Context, targets []target) {
	defer close(t.done)
	reports := make([]ContainerReport, len(targets))
	var wg sync.WaitGroup
	for i, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i] = t.stopContainer(ctx, tg)
			if reports[i].Outcome != OutcomeFailed {
				t.containerEnded(tg.Name)
			}
		}()
	}
	wg.Wait()
	t.report.Containers = reports
	t.report.GracePeriodSeconds = t.deadline.GracePeriodSeconds()
	t.report.Deadline = t.deadline.At()
	t.err = t.confirm(ctx, reports)
}

// confirm reads every stopped container back, and for a pod termination stops the pod's
// sandboxes and reads all of the pod's containers back.
func (t *Termination) confirm(ctx context.Context, reports []ContainerReport) error {
	var errs []error
	for _, r := range reports {
		if r.Outcome == OutcomeFailed {
			errs = append(errs, fmt.Errorf("stopping container %s: %s", r.Name, r.Error))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if t.plan.Reason != ReasonPodTermination {
		t.report.Confirmed = time.Now()
		return nil
	}
	if err := t.e.Confirm(ctx, t.report.PodUID); err != nil {
		return err
	}
	ready, err := t.e.runtime.StopPodSandboxes(ctx, t.report.PodUID)
	if err != nil {
		return fmt.Errorf("stopping sandboxes of pod %s: %w", t.report.Pod, err)
	}
	if ready > 0 {
		return fmt.Errorf("stopping sandboxes of pod %s: %d still ready", t.report.Pod, ready)
	}
	t.report.SandboxesStopped = true
	if err := t.e.Confirm(ctx, t.report.PodUID); err != nil {
		return err
	}
	t.report.Confirmed = time.Now()
	return nil
}

// Confirm reads every container of the pod back from the runtime and fails with a
// *NotConfirmedError unless each one has exited or never started.
func (e *Executor) Confirm(ctx context.Context, podUID string) error {
	all, err := e.runtime.PodContainers(ctx, podUID)
	if err != nil {
		return fmt.Errorf("confirming pod %s: %w", podUID, err)
	}
	running := map[string]ContainerState{}
	for _, c := range all {
		if c.State != StateExited && c.State != StateCreated {
			running[c.Name+"/"+c.ID] = c.State
		}
	}
	if len(running) > 0 {
		return &NotConfirmedError{PodUID: podUID, Running: running}
	}
	return nil
}

// containerEnded closes the name's channel once every container of that name has ended; a
// container that could not be stopped never counts, so those waiting for it wait until the
// grace period expires, as in the kubelet.
func (t *Termination) containerEnded(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending[name]--; t.pending[name] == 0 {
		close(t.ended[name])
	}
}

// isExitedBySIGKILL reports an exit code that says the process died of SIGKILL.
func isExitedBySIGKILL(code int32) bool { return code == 128+int32(syscall.SIGKILL) }
