package executor

import (
	"fmt"
	"strings"
	"time"
)

// Outcome is how a container ended.
type Outcome string

const (
	// OutcomeExited: it exited on its own after its stop signal (or during its preStop hook).
	OutcomeExited Outcome = "Exited"
	// OutcomeKilled: it was still running at its deadline and SIGKILL ended it.
	OutcomeKilled Outcome = "Killed"
	// OutcomeAlreadyExited: it had exited before the executor signalled it.
	OutcomeAlreadyExited Outcome = "AlreadyExited"
	// OutcomeFailed: the executor could not confirm that it ended (see Error).
	OutcomeFailed Outcome = "Failed"
)

// Report is what a termination did, container by container, and its confirmation.
type Report struct {
	Pod    string // namespace/name
	PodUID string
	Reason KillReason
	// Started is when the termination began; GracePeriodSeconds and Deadline are the final
	// values, after any Shorten.
	Started            time.Time
	GracePeriodSeconds int64
	Deadline           time.Time
	Containers         []ContainerReport
	// SandboxesStopped is set once the pod's sandboxes were stopped (pod terminations only).
	SandboxesStopped bool
	// Confirmed is when every container of the pod was read back as exited; zero if never.
	Confirmed time.Time
}

// ContainerReport is what happened to one container.
type ContainerReport struct {
	Name    string
	ID      string
	Sidecar bool
	// PreStop is the preStop hook's run, nil when there was none.
	PreStop *HookReport
	// Signal is the stop signal sent ("SIGTERM") and where it came from.
	Signal       string
	SignalSource SignalSource
	SignalledAt  time.Time
	// KillAt is when SIGKILL was due; KilledAt when the runtime took it (zero if it never did).
	KillAt   time.Time
	KilledAt time.Time
	// ExitedAt and ExitCode are read back from the runtime.
	ExitedAt time.Time
	ExitCode int32
	Outcome  Outcome
	Error    string `json:",omitempty"`
}

// HookReport is a preStop hook's run.
type HookReport struct {
	Started time.Time
	Ended   time.Time
	// Completed is false when the grace period expired first (the hook may still run).
	Completed bool
	Error     string `json:",omitempty"`
}

// Container returns the report of the named container, nil when there is none.
func (r *Report) Container(name string) *ContainerReport {
	for i := range r.Containers {
		if r.Containers[i].Name == name {
			return &r.Containers[i]
		}
	}
	return nil
}

// String is a one-line-per-container summary, times relative to Started.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s (%s) %s grace=%ds confirmed=%v\n", r.Pod, r.PodUID, r.Reason, r.GracePeriodSeconds, !r.Confirmed.IsZero())
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Sub(r.Started).Round(time.Millisecond).String()
	}
	for _, c := range r.Containers {
		fmt.Fprintf(&b, "  %s: %s %s at %s, kill due %s sent %s, exited %s code %d: %s %s\n",
			c.Name, c.Signal, c.SignalSource, rel(c.SignalledAt), rel(c.KillAt), rel(c.KilledAt),
			rel(c.ExitedAt), c.ExitCode, c.Outcome, c.Error)
	}
	return b.String()
}
