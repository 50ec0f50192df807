package executor

import (
	"sync"
	"time"
)

// MinimumGracePeriod is the least time a container gets between its stop signal and SIGKILL
// (the kubelet's minimumGracePeriodInSeconds). For a preStop hook still running when the grace
// period expires, it is the one 2 s extension: the stop signal goes at expiry, SIGKILL 2 s on.
const MinimumGracePeriod = 2 * time.Second

// Deadline is when a termination's grace period ends. Once a termination has started its
// grace period can only be shortened, never lengthened. It is safe for concurrent use.
type Deadline struct {
	mu      sync.Mutex
	initial int64 // the grace period the termination started with
	grace   int64
	at      time.Time
	changed chan struct{}
}

// NewDeadline starts a grace period of graceSeconds at start.
func NewDeadline(start time.Time, graceSeconds int64) *Deadline {
	return &Deadline{initial: graceSeconds, grace: graceSeconds, at: start.Add(seconds(graceSeconds)), changed: make(chan struct{})}
}

// Shorten applies a new grace period requested at now (a second deletion with a shorter
// grace, an eviction). It is accepted only when shorter than the current grace period, like
// the kubelet's pod worker, and counts from now, as the kubelet restarts the kill with the new
// value; the deadline never moves later. It reports whether the grace period changed.
func (d *Deadline) Shorten(graceSeconds int64, now time.Time) bool {
	graceSeconds = max(graceSeconds, minimumPodGracePeriodSeconds)
	d.mu.Lock()
	defer d.mu.Unlock()
	if graceSeconds >= d.grace {
		return false
	}
	d.grace = graceSeconds
	if at := now.Add(seconds(graceSeconds)); at.Before(d.at) {
		d.at = at
		close(d.changed)
		d.changed = make(chan struct{})
	}
	return true
}

// GracePeriodSeconds is the current grace period.
func (d *Deadline) GracePeriodSeconds() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.grace
}

// At is when the grace period ends.
func (d *Deadline) At() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

// Changed is closed when the deadline moves earlier; take it again after each change.
func (d *Deadline) Changed() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

// KillAt is when a container that got its stop signal at signalled is sent SIGKILL, counted
// the way the kubelet's killContainer counts, in whole seconds: the grace period less the
// whole seconds its preStop hook took and the whole seconds it waited for its turn (the
// kubelet truncates each), from the stop signal, and never less than MinimumGracePeriod
// (which is also the one 2 s extension of a hook still running at expiry). A hook of 1.4 s
// with a 6 s grace period thus gives SIGKILL 5 s after the stop signal, 6.4 s after the
// termination began. Once the grace period has been shortened, SIGKILL goes no later than the
// shortened deadline, or MinimumGracePeriod after the stop signal if that is later.
func (d *Deadline) KillAt(signalled time.Time, hook, turn time.Duration) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	floor := signalled.Add(MinimumGracePeriod)
	at := signalled.Add(seconds(d.initial) - hook.Truncate(time.Second) - turn.Truncate(time.Second))
	if at.Before(floor) {
		at = floor
	}
	if d.grace < d.initial {
		shortened := d.at
		if shortened.Before(floor) {
			shortened = floor
		}
		if shortened.Before(at) {
			at = shortened
		}
	}
	return at
}

// Wait blocks until the deadline passes (following any Shorten), done is closed, or stop is
// closed; it reports whether the deadline passed.
func (d *Deadline) Wait(done, stop <-chan struct{}) bool {
	for {
		changed := d.Changed()
		wait := time.Until(d.At())
		if wait <= 0 {
			return true
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
			return true
		case <-done:
			timer.Stop()
			return false
		case <-stop:
			timer.Stop()
			return false
		case <-changed:
			timer.Stop()
		}
	}
}

func seconds(s int64) time.Duration { return time.Duration(s) * time.Second }
