package executor

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// stopContainer stops one container: its preStop hook, its turn, its stop signal, SIGKILL at
// its deadline, and its exit read back.
func (t *Termination) stopContainer(ctx context.Context, tg target) ContainerReport {
	rep := ContainerReport{Name: tg.Name, ID: tg.ID, Sidecar: tg.plan.Sidecar}
	hookCtx, cancelHook := context.WithCancel(ctx)
	defer cancelHook() // a hook still running ends with its container at the latest
	var spent spent
	if tg.plan.PreStop != nil && time.Now().Before(t.deadline.At()) {
		rep.PreStop = t.runPreStop(hookCtx, tg)
		spent.hook = rep.PreStop.Ended.Sub(rep.PreStop.Started)
	}
	turn := time.Now()
	t.waitForTurn(ctx, tg.plan.WaitFor)
	spent.turn = time.Since(turn)
	if st, err := t.e.runtime.Status(ctx, tg.ID); err == nil && st.State == StateExited {
		rep.Outcome, rep.ExitCode, rep.ExitedAt = OutcomeAlreadyExited, st.ExitCode, st.FinishedAt
		if rep.PreStop != nil {
			rep.Outcome = OutcomeExited // it ended during its hook
		}
		return rep
	}
	if _, err := t.e.runtime.PreventRestart(ctx, tg.ID); err != nil {
		rep.Error = fmt.Sprintf("preventing restarts: %v", err) // the exit is confirmed below all the same
	}
	var image string
	if tg.plan.StopSignal == "" { // the spec's lifecycle.stopSignal goes before the image's
		var err error
		if image, err = t.imageStopSignal(ctx, tg.ID); err != nil {
			image = "" // the runtime's default then, as for an image without STOPSIGNAL
			rep.Error = withNote(rep.Error, fmt.Sprintf("reading the image's stop signal: %v (the default sent instead)", err))
		}
	}
	sig, src, err := StopSignal(tg.plan.StopSignal, image)
	if err != nil {
		sig, src = syscall.SIGTERM, SignalDefault
		rep.Error = withNote(rep.Error, fmt.Sprintf("%v (SIGTERM sent instead)", err))
	}
	rep.Signal, rep.SignalSource = SignalName(sig), src
	t.signalAndWait(ctx, tg, sig, spent, &rep)
	return rep
}

// imageStopSignalTries are the waits before each further read of an image's STOPSIGNAL after
// one failed: a runtime busy for a moment must not have a container that names its own stop
// signal (a database's SIGINT) sent the default instead. They add at most 300 ms before the
// stop signal, only when a read fails.
var imageStopSignalTries = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}

// imageStopSignal reads the image's STOPSIGNAL of container id, trying again (imageStopSignalTries)
// while the read fails for another reason than the container being gone.
func (t *Termination) imageStopSignal(ctx context.Context, id string) (string, error) {
	sig, err := t.e.runtime.ImageStopSignal(ctx, id)
	for _, wait := range imageStopSignalTries {
		if err == nil || errors.Is(err, ErrNotFound) {
			break
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(wait):
		}
		sig, err = t.e.runtime.ImageStopSignal(ctx, id)
	}
	return sig, err
}

// spent is the time a container's termination took before its stop signal: its preStop
// hook's run and its wait for its turn, which the kubelet takes from its grace period in
// whole seconds (see Deadline.KillAt).
type spent struct{ hook, turn time.Duration }

// runPreStop runs the hook until it ends or the grace period expires; a hook still running
// then goes on (until its container ends) while the container gets its stop signal.
func (t *Termination) runPreStop(ctx context.Context, tg target) *HookReport {
	h := &HookReport{Started: time.Now()}
	ended := make(chan struct{})
	var hookErr error
	go func() {
		defer close(ended)
		hookErr = t.e.runHook(ctx, t.req.Pod, tg)
	}()
	expired := t.deadline.Wait(ended, ctx.Done())
	h.Ended = time.Now()
	if !expired && ctx.Err() == nil {
		h.Completed = true
		if hookErr != nil {
			h.Error = hookErr.Error()
		}
	}
	return h
}

// waitForTurn waits until every named container has ended, or the grace period expires.
func (t *Termination) waitForTurn(ctx context.Context, names []string) {
	for _, name := range names {
		ch := t.ended[name]
		if ch == nil {
			continue
		}
		if t.deadline.Wait(ch, ctx.Done()) || ctx.Err() != nil {
			return
		}
	}
}

// signalAndWait sends the stop signal, then SIGKILL once KillAt has passed, and polls the
// container's status until it is read back as exited. A stop signal the runtime did not take
// is sent again until it takes one or KillAt comes, as the kubelet's pod worker tries the kill
// again; one it took is never sent again (a second one means "exit now" to some servers).
// KillAt counts from the first try. A SIGKILL the runtime did not take is sent again until it
// takes one (SIGKILL twice is harmless); ExitTimeout after its first try the container fails.
// Refused signals are tried again at a growing interval (stopSender.due), its status read at
// every poll all the same. KilledAt is when a SIGKILL was taken.
func (t *Termination) signalAndWait(ctx context.Context, tg target, sig syscall.Signal, spent spent, rep *ContainerReport) {
	rt := t.e.runtime
	rep.SignalledAt = time.Now()
	stop, kill := stopSender{sig: sig, every: t.e.PollInterval}, stopSender{sig: syscall.SIGKILL, every: t.e.PollInterval}
	var killTried time.Time // the first SIGKILL's try: ExitTimeout counts from it
	stop.send(ctx, rt, tg.ID)
	for {
		rep.KillAt = t.deadline.KillAt(rep.SignalledAt, spent.hook, spent.turn)
		st, err := rt.Status(ctx, tg.ID)
		if errors.Is(err, ErrNotFound) {
			st, err = ContainerStatus{State: StateExited, ExitCode: -1, FinishedAt: time.Now()}, nil
		}
		if err == nil && st.State == StateExited {
			if killTried.IsZero() {
				rep.Error = withNote(rep.Error, stop.note(rep.SignalledAt))
			} else {
				rep.Error = withNote(rep.Error, kill.note(killTried))
			}
			rep.ExitCode, rep.ExitedAt, rep.Outcome = st.ExitCode, st.FinishedAt, OutcomeExited
			if kill.accepted && isExitedBySIGKILL(st.ExitCode) {
				rep.Outcome = OutcomeKilled
			}
			return
		}
		now := time.Now()
		if killTried.IsZero() && !now.Before(rep.KillAt) {
			rep.Error = withNote(rep.Error, stop.note(rep.SignalledAt)) // confirmed below either way
			killTried = now
			kill.send(ctx, rt, tg.ID)
		} else if !killTried.IsZero() && kill.due(now) {
			kill.send(ctx, rt, tg.ID)
		}
		if kill.accepted && rep.KilledAt.IsZero() {
			rep.KilledAt = kill.at
		}
		if !killTried.IsZero() && now.Sub(killTried) > t.e.ExitTimeout {
			rep.Outcome = OutcomeFailed
			rep.Error = withNote(rep.Error, kill.note(killTried))
			rep.Error = withNote(rep.Error, fmt.Sprintf("not exited %s after SIGKILL was first tried (last state %s, %v)", t.e.ExitTimeout, st.State, err))
			return
		}
		if err := t.sleep(ctx, rep.KillAt); err != nil {
			if killTried.IsZero() {
				rep.Error = withNote(rep.Error, stop.note(rep.SignalledAt))
			} else {
				rep.Error = withNote(rep.Error, kill.note(killTried))
			}
			t.killAtTimeLimit(ctx, tg, err, rep)
			return
		}
		if now := time.Now(); stop.due(now) && now.Before(rep.KillAt) {
			stop.send(ctx, rt, tg.ID)
		}
	}
}

// stopSender sends a container's stop signal until the runtime takes it, and counts the tries.
type stopSender struct {
	sig      syscall.Signal
	accepted bool
	tries    int
	first    error     // the first try's error, nil when it was taken
	at       time.Time // when it was taken
	// every is the wait after the first refused try, doubled after each further one up to
	// maxSignalRetry; next is when a try is due again.
	every time.Duration
	next  time.Time
}

// maxSignalRetry bounds the wait between two tries of a signal the runtime refused: a runtime
// that refuses is likely busy, and polls of its status go on every PollInterval meanwhile.
const maxSignalRetry = time.Second

// send tries the signal once; a container already gone counts as taken.
func (s *stopSender) send(ctx context.Context, rt Runtime, id string) {
	s.tries++
	err := rt.Signal(ctx, id, s.sig)
	if err != nil && !errors.Is(err, ErrNotFound) {
		if s.first == nil {
			s.first = err
		}
		wait := min(s.every<<min(s.tries-1, 16), maxSignalRetry)
		s.next = time.Now().Add(wait)
		return
	}
	s.accepted, s.at = true, time.Now()
}

// due says whether a signal not taken yet is to be tried again at now.
func (s *stopSender) due(now time.Time) bool {
	return !s.accepted && !now.Before(s.next)
}

// note is what the report says of a stop signal that failed at the first try: "" when none
// did.
func (s *stopSender) note(first time.Time) string {
	name := SignalName(s.sig)
	switch {
	case s.first == nil:
		return ""
	case s.accepted:
		return fmt.Sprintf("sending %s: %v (sent at try %d, %s later)", name, s.first, s.tries, s.at.Sub(first).Round(time.Millisecond))
	}
	return fmt.Sprintf("sending %s: %v (not sent in %d tries)", name, s.first, s.tries)
}

// killTimeout bounds the SIGKILL sent once the order's time limit has passed.
const killTimeout = 5 * time.Second

// killAtTimeLimit ends a container whose order's time limit came before it was read back as
// exited, during its hook, its wait for its turn or its grace period. The kubelet never leaves
// a kill half-way, and a container left running could write to a volume the controller has
// already released, so it sends SIGKILL (again, if it was sent already: it is idempotent)
// outside the ended context. The exit is not read back in time, so it is still a failure.
func (t *Termination) killAtTimeLimit(ctx context.Context, tg target, cause error, rep *ContainerReport) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	rep.Outcome = OutcomeFailed
	if err := t.e.runtime.Signal(kctx, tg.ID, syscall.SIGKILL); err != nil && !errors.Is(err, ErrNotFound) {
		rep.Error = withNote(rep.Error, fmt.Sprintf("waiting for exit: %v; sending SIGKILL at the time limit: %v", cause, err))
		return
	}
	if rep.KilledAt.IsZero() {
		rep.KilledAt = time.Now()
	}
	rep.Error = withNote(rep.Error, fmt.Sprintf("waiting for exit: %v; SIGKILL sent at the time limit, exit not read back", cause))
}

// sleep waits one poll interval, less if killAt comes sooner; it wakes early when the
// deadline is shortened.
func (t *Termination) sleep(ctx context.Context, killAt time.Time) error {
	d := t.e.PollInterval
	if until := time.Until(killAt); until > 0 && until < d {
		d = until
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.deadline.Changed():
	case <-timer.C:
	}
	return nil
}

// withNote adds note to a report's error text, after what it says already; an empty note adds
// nothing.
func withNote(text, note string) string {
	switch {
	case note == "":
		return text
	case text == "":
		return note
	}
	return text + "; " + note
}
