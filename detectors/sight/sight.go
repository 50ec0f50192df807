package sight

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
)

// CanaryName is the canary Lease's name, in lease.Namespace next to the node Leases.
const CanaryName = "palisade-sight.fencing.palisade.dev"

// Cause is why the controller lost sight last (the same words as the ControllerBlind
// condition's reasons).
type Cause string

// Causes.
const (
	Starting       Cause = v1alpha1.ReasonStarting
	APIUnreachable Cause = v1alpha1.ReasonAPIUnreachable
	WatchStale     Cause = v1alpha1.ReasonWatchStale
	ClockJumped    Cause = v1alpha1.ReasonClockJumped
)

// Status is the tracker's state at one moment.
type Status struct {
	// Blind is true while the canary is not seen fresh.
	Blind bool
	// Cause and Message say why sight was lost last.
	Cause   Cause
	Message string
	// Since is when the controller began to see without a gap: the start, or the end of the
	// last blind spell (while blind, when sight was lost).
	Since time.Time
	// LastLost is when sight was lost last (the start counts).
	LastLost time.Time
	// Seen says the tracker has seen at least once since it started (or won leadership): a
	// blind spell before that has the start's Since, whatever its cause says by now.
	Seen bool
}

// Options configure a Tracker. Client writes the canary; Cache reads it back and must be the
// cache that holds the node Leases. Zero durations take the defaults.
type Options struct {
	Client client.Client
	Cache  client.Reader
	// Interval between rounds; default 1s.
	Interval time.Duration
	// StaleAfter is how old the canary value the cache shows may be; default 3s.
	StaleAfter time.Duration
	// ClockTolerance is how far wall and monotonic clocks may drift apart in a round before
	// it counts as a clock jump; default 1s.
	ClockTolerance time.Duration
	// Now is the wall clock and Elapsed the monotonic one (tests); defaults time.Now and the
	// time since the tracker was built.
	Now     func() time.Time
	Elapsed func() time.Duration
}

// written is a canary value and the monotonic instant it was written at.
type written struct {
	value time.Time
	at    time.Duration
}

// Tracker is a controller-runtime Runnable that runs on the leader only.
type Tracker struct {
	o   Options
	log logr.Logger

	mu      sync.Mutex
	st      Status
	ring    []written
	last    time.Time     // wall clock of the last round
	lastMon time.Duration // monotonic clock of the last round
	subs    []func(Status)
}

// New builds a tracker, blind (Starting) until its first round trip.
func New(o Options) *Tracker {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 3 * time.Second
	}
	if o.ClockTolerance <= 0 {
		o.ClockTolerance = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Elapsed == nil {
		start := time.Now()
		o.Elapsed = func() time.Duration { return time.Since(start) }
	}
	now := o.Now().Round(0)
	return &Tracker{o: o, log: ctrl.Log.WithName("sight"), st: Status{Blind: true, Cause: Starting, Message: "the controller has not started", Since: now, LastLost: now}}
}

// NeedLeaderElection: only the leader fences, and winning leadership restarts sight.
func (t *Tracker) NeedLeaderElection() bool { return true }

// Start runs rounds until ctx ends. The start itself is a loss of sight: the controller saw
// nothing before it.
func (t *Tracker) Start(ctx context.Context) error {
	t.log = ctrl.LoggerFrom(ctx).WithName("sight")
	t.lose(Starting, "the controller started or won leadership", t.o.Now().Round(0))
	t.mu.Lock()
	t.last, t.lastMon = t.o.Now().Round(0), t.o.Elapsed()
	t.mu.Unlock()
	tick := time.NewTicker(t.o.Interval)
	defer tick.Stop()
	for {
		t.Round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Round is one check: clock, canary write, canary read-back through the cache. Each call is
// bounded by Interval, so a round never hangs on a dead API server or an unsynced cache.
func (t *Tracker) Round(ctx context.Context) {
	now, mon := t.o.Now().Round(0), t.o.Elapsed()
	t.mu.Lock()
	jump := now.Sub(t.last) - (mon - t.lastMon)
	checked := !t.last.IsZero()
	t.last, t.lastMon = now, mon
	t.mu.Unlock()
	if checked && (jump > t.o.ClockTolerance || jump < -t.o.ClockTolerance) {
		t.lose(ClockJumped, fmt.Sprintf("the wall clock jumped by %s against the monotonic clock", jump.Round(time.Millisecond)), now)
	}
	if err := t.write(ctx, now, mon); err != nil {
		t.lose(APIUnreachable, fmt.Sprintf("writing the canary Lease %s/%s: %v", lease.Namespace, CanaryName, err), now)
		return
	}
	if ok, msg := t.fresh(ctx, mon); !ok {
		t.lose(WatchStale, msg, now)
		return
	}
	t.see(now)
}

// write sets the canary's renewTime to now (creating the Lease when missing) and remembers
// the value.
func (t *Tracker) write(ctx context.Context, now time.Time, mon time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, t.o.Interval)
	defer cancel()
	value := now.Truncate(time.Microsecond)
	renew := metav1.NewMicroTime(value)
	canary := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: CanaryName}}
	patch := fmt.Appendf(nil, `{"spec":{"renewTime":%q}}`, renew.UTC().Format(metav1.RFC3339Micro))
	err := t.o.Client.Patch(ctx, canary, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		canary = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: CanaryName},
			Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}
		err = t.o.Client.Create(ctx, canary)
	}
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ring = append(t.ring, written{value: value, at: mon})
	for len(t.ring) > 0 && mon-t.ring[0].at > t.o.StaleAfter {
		t.ring = t.ring[1:]
	}
	return nil
}

// fresh says whether the cache shows a canary value written within StaleAfter.
func (t *Tracker) fresh(ctx context.Context, mon time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, t.o.Interval) // a cache not synced yet waits
	defer cancel()
	canary := &coordinationv1.Lease{}
	if err := t.o.Cache.Get(ctx, client.ObjectKey{Namespace: lease.Namespace, Name: CanaryName}, canary); err != nil {
		return false, fmt.Sprintf("reading the canary Lease back through the watch: %v", err)
	}
	if canary.Spec.RenewTime == nil {
		return false, "the watch shows the canary Lease without a renewTime"
	}
	seen := canary.Spec.RenewTime.Time
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.ring {
		if w.value.Equal(seen) && mon-w.at <= t.o.StaleAfter {
			return true, ""
		}
	}
	return false, fmt.Sprintf("the watch shows the canary Lease as written at %s, not one of the values written within %s", seen.UTC().Format(time.RFC3339Nano), t.o.StaleAfter)
}

// lose turns the tracker blind: a new loss when it was seeing, at the start or on a clock
// jump; within one blind spell, a new cause only updates why (the spell began when it began).
func (t *Tracker) lose(c Cause, msg string, now time.Time) {
	t.mu.Lock()
	lost := !t.st.Blind || c == ClockJumped || c == Starting
	news := lost || t.st.Cause != c // the same spell for the same cause: nothing new to say
	if lost {
		t.st = Status{Blind: true, Cause: c, Message: msg, Since: now, LastLost: now, Seen: t.st.Seen && c != Starting}
		sightLost.WithLabelValues(string(c)).Inc()
	} else if news {
		t.st.Cause, t.st.Message = c, msg
	}
	st := t.st
	t.mu.Unlock()
	blind.Set(1)
	if news {
		t.log.Info("controller blind: nothing is fenced automatically", "cause", st.Cause, "message", st.Message, "since", st.LastLost)
		t.notify(st)
	}
}

// see ends a blind spell: every node's Lease counts from now.
func (t *Tracker) see(now time.Time) {
	t.mu.Lock()
	changed := t.st.Blind
	if changed {
		t.st.Blind, t.st.Since = false, now
	}
	t.st.Seen = true
	st := t.st
	t.mu.Unlock()
	blind.Set(0)
	seeingSince.Set(float64(st.Since.UnixNano()) / 1e9)
	if changed {
		t.log.Info("controller sees again", "cause", st.Cause, "lostAt", st.LastLost)
		t.notify(st)
	}
}

// Subscribe has f called (outside the tracker's lock, on the tracker's goroutine; f must not
// block) each time Blind or Since changes.
func (t *Tracker) Subscribe(f func(Status)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.subs = append(t.subs, f)
}

func (t *Tracker) notify(st Status) {
	t.mu.Lock()
	subs := t.subs
	t.mu.Unlock()
	for _, f := range subs {
		f(st)
	}
}

// Status is the tracker's state now.
func (t *Tracker) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

// Since is when the controller began to see without a gap (observe.Sight).
func (t *Tracker) Since() time.Time { return t.Status().Since }

// Cause is why sight was lost last (observe.Sight).
func (t *Tracker) Cause() string { return string(t.Status().Cause) }

// Blind says whether the controller is blind now, why, and the details.
func (t *Tracker) Blind() (bool, Cause, string) {
	st := t.Status()
	return st.Blind, st.Cause, st.Message
}
