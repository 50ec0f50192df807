package selffence

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/detectors/heartbeat"
	"palisade.dev/palisade/providers/agent/orders"
)

const interval = 200 * time.Millisecond

// TestSelfFencerDecides: the decision alone, on a Commander without a runtime (so a self-fence
// fails at once, "no runtime configured", and then arms the watchdog anyway): never when
// disabled or while the controller or the API server is reachable; once per isolation; again
// after the node was reachable in between.
func TestSelfFencerDecides(t *testing.T) {
	wd := filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(wd, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	o := Config{Interval: interval, WatchdogDevice: wd}
	co := orders.Config{Timeout: time.Second, ReadBackWait: interval}

	disabled := orders.NewCommander(co, logr.Discard())
	f := New(o, disabled, logr.Discard(), t0)
	f.Observe(ctx, heartbeat.Reachability{}, at(100))
	if st := disabled.Status(); st != nil {
		t.Errorf("self-fenced with --self-fence-after 0: %+v", st)
	}

	o.After = 2 * time.Second
	c := orders.NewCommander(co, logr.Discard())
	f = New(o, c, logr.Discard(), t0)
	f.Observe(ctx, heartbeat.Reachability{Controller: true, API: false}, at(1)) // controller reachable
	f.Observe(ctx, heartbeat.Reachability{Controller: false, API: true}, at(3)) // API server reachable
	f.Observe(ctx, heartbeat.Reachability{}, at(5))                             // isolated 2 s: not longer than the threshold
	if st := c.Status(); st != nil {
		t.Fatalf("self-fenced while reachable or not isolated long enough: %+v", st)
	}
	f.Observe(ctx, heartbeat.Reachability{}, at(5.5))
	c.Wait()
	first := c.Status()
	if first == nil || first.ID != "self-fence-1000005" || first.State != agentwire.ExecutorFailed || first.Message != orders.ErrNoRuntime.Error() {
		t.Fatalf("status %+v, want self-fence-1000005 Failed: no runtime configured", first)
	}
	if b, _ := os.ReadFile(wd); string(b) != "1" {
		t.Errorf("watchdog device holds %q, want \"1\"", b)
	}
	f.Observe(ctx, heartbeat.Reachability{}, at(9)) // still the same isolation
	c.Wait()
	if st := c.Status(); st.ID != first.ID {
		t.Errorf("self-fenced twice in one isolation: %+v", st)
	}
	f.Observe(ctx, heartbeat.Reachability{Controller: false, API: true}, at(10)) // reachable: re-armed
	f.Observe(ctx, heartbeat.Reachability{}, at(11))
	f.Observe(ctx, heartbeat.Reachability{}, at(12.5))
	c.Wait()
	if st := c.Status(); st.ID != "self-fence-1000012" {
		t.Errorf("after a new isolation: %+v, want self-fence-1000012", st)
	}
	f.Observe(ctx, heartbeat.Reachability{Peers: true}, at(13)) // a peer answers: not isolated, re-armed
	f.Observe(ctx, heartbeat.Reachability{Peers: true}, at(16))
	c.Wait()
	if st := c.Status(); st.ID != "self-fence-1000012" {
		t.Errorf("self-fenced while a peer was reachable: %+v", st)
	}
	f.Observe(ctx, heartbeat.Reachability{}, at(17))
	f.Observe(ctx, heartbeat.Reachability{}, at(18.5))
	c.Wait()
	if st := c.Status(); st.ID != "self-fence-1000018" {
		t.Errorf("after peers too were lost: %+v, want self-fence-1000018", st)
	}
}

// Within, which the heartbeats carry to the controller's SelfFence method, is --self-fence-after
// plus twice the petted watchdog's timeout, and 0 when the agent does not promise a self-fence:
// self-fencing off, or no petted watchdog (a watchdog armed only by a self-fence covers nothing
// when the agent stops after its node was cut off).
func TestWithinIsWhatTheAgentPromises(t *testing.T) {
	wd := filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(wd, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    Config
		want time.Duration
	}{
		{Config{After: time.Minute, WatchdogDevice: wd, WatchdogTimeout: 30 * time.Second, WatchdogStandIn: true, Interval: interval}, 2 * time.Minute},
		{Config{After: time.Minute, WatchdogDevice: wd, WatchdogStandIn: true, Interval: interval}, 0},
		{Config{After: time.Minute, Interval: interval}, 0},
		{Config{After: 0, WatchdogDevice: wd, WatchdogTimeout: 30 * time.Second, WatchdogStandIn: true, Interval: interval}, 0},
	} {
		f := New(tc.o, nil, logr.Discard(), time.Now())
		if err := f.ArmWatchdog(); err != nil {
			t.Fatal(err)
		}
		if got := f.Within(); got != tc.want {
			t.Errorf("Within of %+v = %s, want %s", tc.o, got, tc.want)
		}
	}
	var none *Fencer
	if got := none.Within(); got != 0 {
		t.Errorf("Within without a self-fencer = %s, want 0", got)
	}
}

// A self-fence that did not confirm the workload stopped (here: no runtime) is tried again in
// the same isolation, retryUnconfirmed after it began, not at every heartbeat: the controller's
// SelfFence method relies on the agent having stopped the workload by the time it promised.
func TestUnconfirmedSelfFenceIsTriedAgain(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(2_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	c := orders.NewCommander(orders.Config{Timeout: time.Second, ReadBackWait: interval}, logr.Discard())
	f := New(Config{Interval: interval, After: 2 * time.Second}, c, logr.Discard(), t0)
	f.Observe(ctx, heartbeat.Reachability{}, at(3))
	c.Wait()
	if st := c.Status(); st == nil || st.ID != "self-fence-2000003" || st.State != agentwire.ExecutorFailed {
		t.Fatalf("status %+v, want self-fence-2000003 Failed", st)
	}
	f.Observe(ctx, heartbeat.Reachability{}, at(3+retryUnconfirmed.Seconds()-1))
	c.Wait()
	if st := c.Status(); st.ID != "self-fence-2000003" {
		t.Errorf("tried again %s after a failed self-fence, before retryUnconfirmed: %+v", retryUnconfirmed-time.Second, st)
	}
	f.Observe(ctx, heartbeat.Reachability{}, at(3+retryUnconfirmed.Seconds()))
	c.Wait()
	if st := c.Status(); st.ID != fmt.Sprintf("self-fence-%d", 2_000_003+int(retryUnconfirmed.Seconds())) {
		t.Errorf("a failed self-fence was not tried again after %s: %+v", retryUnconfirmed, st)
	}
}

// An agent restarted while its node is isolated counts the isolation from the last reach it
// recorded in its state directory (ReachedFile), not from its restart: its heartbeats promised
// the controller a self-fence at the latest --self-fence-after (plus the termination) after the
// last reach. A reach of another boot and no file count from the start; a malformed file, a
// reach "after now" and no boot ID count as a reach long ago; a restarted agent waits startGrace intervals for a
// peer's acknowledgement before it fences itself.
func TestRestartCountsIsolationFromTheLastReach(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(3_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	dir := t.TempDir()
	o := Config{Interval: interval, After: 10 * time.Second, StateDir: dir, BootID: "boot-1"}
	co := orders.Config{Timeout: time.Second, ReadBackWait: interval}
	file := filepath.Join(dir, ReachedFile)
	recorded := func() time.Time {
		t.Helper()
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var r reached
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if r.BootID != "boot-1" {
			t.Errorf("recorded boot ID %q, want boot-1", r.BootID)
		}
		return r.Reached
	}
	// fencedBy starts an agent at start with config o and says at which of the isolated
	// heartbeats (at, in seconds after t0) it started a self-fence; -1: none.
	fencedBy := func(o Config, start float64, beats ...float64) float64 {
		t.Helper()
		c := orders.NewCommander(co, logr.Discard())
		f := New(o, c, logr.Discard(), at(start))
		for _, s := range beats {
			f.Observe(ctx, heartbeat.Reachability{}, at(s))
			c.Wait()
			if st := c.Status(); st != nil {
				return s
			}
		}
		return -1
	}

	c := orders.NewCommander(co, logr.Discard())
	f := New(o, c, logr.Discard(), t0)
	f.Observe(ctx, heartbeat.Reachability{Controller: true}, at(1))
	if got := recorded(); !got.Equal(at(1)) {
		t.Errorf("first reach recorded as %s, want %s", got, at(1))
	}
	f.Observe(ctx, heartbeat.Reachability{Peers: true}, at(3))
	if got := recorded(); !got.Equal(at(1)) {
		t.Errorf("a reach 2 s later was written (%s): at most every %s", got, persistEvery)
	}
	f.Observe(ctx, heartbeat.Reachability{API: true}, at(7))
	if got := recorded(); !got.Equal(at(7)) {
		t.Errorf("last reach recorded as %s, want %s", got, at(7))
	}
	f.Observe(ctx, heartbeat.Reachability{}, at(8)) // isolated from 7 s on; the agent restarts at 12 s

	if got := fencedBy(o, 12, 12.1, 16, 17.5); got != 17.5 {
		t.Errorf("restarted at 12 s, isolated since the reach at 7 s: self-fenced at %v s, want 17.5 (10 s after the last reach, not after the restart)", got)
	}
	other := o
	other.BootID = "boot-2"
	if got := fencedBy(other, 12, 12.1, 17.5, 22.5); got != 22.5 {
		t.Errorf("after a reboot: self-fenced at %v s, want 22.5 (10 s after the start: the reboot stopped the workload)", got)
	}
	if got := fencedBy(o, 30, 30.1, 30.5); got != 30.5 {
		t.Errorf("restarted long after the last reach: self-fenced at %v s, want 30.5 (after %d intervals' grace for a peer's acknowledgement)", got, startGrace)
	}
	if got := fencedBy(o, 5, 5.1, 5.5); got != 5.5 {
		t.Errorf("started before the recorded reach (the clock went back): self-fenced at %v s, want 5.5 (a reach long ago, after the start's grace)", got)
	}
	noBoot := o
	noBoot.BootID = ""
	if got := fencedBy(noBoot, 12, 12.1, 12.5); got != 12.5 {
		t.Errorf("without a boot ID to compare: self-fenced at %v s, want 12.5 (a reach long ago, after the start's grace)", got)
	}
	memory := o
	memory.StateDir = ""
	if got := fencedBy(memory, 12, 17.5, 22.5); got != 22.5 {
		t.Errorf("without a state directory: self-fenced at %v s, want 22.5 (from the start)", got)
	}

	// A restarted agent that is reached records the new reach at once.
	f = New(o, orders.NewCommander(co, logr.Discard()), logr.Discard(), at(12))
	f.Observe(ctx, heartbeat.Reachability{Peers: true}, at(12.2))
	if got := recorded(); !got.Equal(at(12.2)) {
		t.Errorf("a restarted agent's first reach recorded as %s, want %s", got, at(12.2))
	}

	if err := os.WriteFile(file, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := fencedBy(o, 40, 40.1, 40.5); got != 40.5 {
		t.Errorf("with a malformed %s: self-fenced at %v s, want 40.5 (a reach long ago, after the start's grace)", ReachedFile, got)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if got := fencedBy(o, 40, 40.5, 49, 50.5); got != 50.5 {
		t.Errorf("without %s: self-fenced at %v s, want 50.5 (10 s after the start)", ReachedFile, got)
	}
}

// The petted watchdog (WatchdogTimeout): armed at the start and petted by its loop (petTick
// here) while the node was reached at most After ago, whether the heartbeats reach anything or
// not, and never after; the promise is After plus twice the watchdog's timeout (the kernel pings
// a device closed without the magic character once more), even without a runtime to stop the
// workload with, and none without the petted watchdog; a graceful exit disarms it only when the
// node was just reached and the controller took the farewell that withdraws the promise; an
// agent restarted long into an isolation neither opens nor pets it before a reach (opening would
// restart the timer the agent before it left running). A file is refused as a device unless it
// is a declared stand-in; a device that cannot be opened fails the start.
func TestPettedWatchdog(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(4_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	dir := t.TempDir()
	wd := filepath.Join(dir, "watchdog")
	written := func() string { t.Helper(); return holds(t, wd) }
	o := Config{Interval: interval, After: 2 * time.Second, WatchdogDevice: wd, WatchdogTimeout: 5 * time.Second, WatchdogStandIn: true,
		StateDir: filepath.Join(dir, "state"), BootID: "boot-1"}
	co := orders.Config{Timeout: time.Second, ReadBackWait: interval}
	// start starts an agent with o at s (seconds after t0) on an empty device, its pets by hand.
	start := func(o Config, s float64, c *orders.Commander) *Fencer {
		t.Helper()
		return startAgent(t, wd, o, at(s), c)
	}
	// beat is a heartbeat at s that reached r, and a pass of the pet loop.
	beat := func(f *Fencer, r heartbeat.Reachability, s float64) {
		f.Observe(ctx, r, at(s))
		f.petTick(at(s))
	}

	c := orders.NewCommander(co, logr.Discard())
	f := start(o, 0, c)
	if got, want := f.Within(), 12*time.Second; got != want {
		t.Errorf("Within with a petted watchdog = %s, want %s (--self-fence-after plus twice its timeout)", got, want)
	}
	if got := written(); got != "1" {
		t.Fatalf("after arming the device holds %q, want one pet", got)
	}
	beat(f, heartbeat.Reachability{Controller: true}, 1)
	beat(f, heartbeat.Reachability{}, 2)   // isolated 1 s
	beat(f, heartbeat.Reachability{}, 2.9) // isolated 1.9 s: still petted
	if got := written(); got != "1111" {
		t.Errorf("device holds %q, want a pet at the start and at each of 3 passes not isolated longer than 2 s", got)
	}
	beat(f, heartbeat.Reachability{}, 3.5) // isolated 2.5 s: the self-fence, no pet
	c.Wait()
	beat(f, heartbeat.Reachability{}, 4)
	if got := written(); got != "1111" {
		t.Errorf("device holds %q after the isolation passed 2 s, want no more pets (nor the self-fence's own write)", got)
	}
	if st := c.Status(); st == nil || !strings.HasPrefix(st.ID, "self-fence-") {
		t.Errorf("no self-fence after 2.5 s of isolation: %+v", st)
	}
	f.Close(at(4.1), true, interval)
	if got := written(); got != "1111" {
		t.Errorf("a graceful exit while isolated wrote to the device (%q): it must stay armed", got)
	}

	// Reached: petted; a graceful exit just after a reach disarms it only once the controller
	// took the farewell.
	f = start(o, 10, orders.NewCommander(co, logr.Discard()))
	beat(f, heartbeat.Reachability{Peers: true}, 10.2)
	f.Close(at(10.3), false, interval)
	if got := written(); got != "11" {
		t.Errorf("a graceful exit whose farewell the controller did not take: device holds %q, want two pets and no magic close (the promise stands)", got)
	}
	f = start(o, 10, orders.NewCommander(co, logr.Discard()))
	beat(f, heartbeat.Reachability{Peers: true}, 10.2)
	f.Close(at(10.3), true, interval)
	if got := written(); got != "11V" {
		t.Errorf("device holds %q, want two pets and the magic close", got)
	}

	// A policy lengthened the heartbeats to 30 s: a reach 1 s before the exit is recent (within
	// two of them, and within After), though 5 of the flag's intervals ago.
	f = start(o, 10, orders.NewCommander(co, logr.Discard()))
	beat(f, heartbeat.Reachability{Peers: true}, 10.2)
	f.Close(at(11.2), true, 30*time.Second)
	if got := written(); got != "11V" {
		t.Errorf("a graceful exit 1 s after a reach, heartbeats every 30 s: device holds %q, want the magic close", got)
	}

	// Restarted long after the last reach (10.2 s, recorded above; isolated since): the device
	// is neither opened nor petted, and nothing is promised, until a reach.
	f = start(o, 30, orders.NewCommander(co, logr.Discard()))
	beat(f, heartbeat.Reachability{}, 30.1)
	beat(f, heartbeat.Reachability{}, 30.5)
	if got, within := written(), f.Within(); got != "" || within != 0 {
		t.Errorf("an agent restarted 20 s into an isolation: device holds %q, Within %s; want nothing written, no promise", got, within)
	}
	beat(f, heartbeat.Reachability{API: true}, 31)
	if got, within := written(), f.Within(); got != "11" || within != 12*time.Second {
		t.Errorf("reached again: device holds %q, Within %s; want opened and petted (\"11\"), 12s", got, within)
	}

	// No timeout: nothing opened at the start (armed only by a self-fence), no promise.
	legacy := o
	legacy.WatchdogTimeout = 0
	f = start(legacy, 40, orders.NewCommander(co, logr.Discard()))
	beat(f, heartbeat.Reachability{Controller: true}, 40.2)
	if got := f.Within(); written() != "" || got != 0 {
		t.Errorf("without --watchdog-timeout: device holds %q, Within %s; want nothing written, no promise", written(), got)
	}

	real := o
	real.WatchdogStandIn, real.StateDir = false, "" // a first start: opened at once
	if err := New(real, nil, logr.Discard(), t0).ArmWatchdog(); err == nil || !strings.Contains(err.Error(), "is not a watchdog device") {
		t.Errorf("ArmWatchdog of a plain file without --watchdog-stand-in = %v, want a refusal", err)
	}
	if got := written(); got != "V" {
		t.Errorf("a refused file holds %q, want the magic close only (a refused device is not left armed)", got)
	}
	missing := o
	missing.WatchdogDevice, missing.StateDir = filepath.Join(dir, "no-such-device"), ""
	if err := New(missing, nil, logr.Discard(), t0).ArmWatchdog(); err == nil || !strings.Contains(err.Error(), "opening the watchdog device") {
		t.Errorf("ArmWatchdog of a missing device = %v, want an error", err)
	}
}

// The pet loop pets on its own clock, whatever the heartbeats do (a policy may stretch them to a
// minute, longer than the watchdog's timeout), while the node was reached at most After ago,
// and stops then; a graceful exit stops it before the magic close.
func TestPetLoopPetsOnItsOwnClock(t *testing.T) {
	wd := filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(wd, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	o := Config{Interval: time.Minute, After: 1500 * time.Millisecond, WatchdogDevice: wd, WatchdogTimeout: time.Second, WatchdogStandIn: true}
	f := New(o, orders.NewCommander(orders.Config{Timeout: time.Second}, logr.Discard()), logr.Discard(), time.Now())
	if err := f.ArmWatchdog(); err != nil {
		t.Fatal(err)
	}
	defer f.dog.halt()
	time.Sleep(time.Second)
	b, _ := os.ReadFile(wd)
	if n := len(b); n < 3 {
		t.Errorf("%d pets in the first second (a pet every 250 ms), want at least 3, with no heartbeat at all", n)
	}
	time.Sleep(time.Second) // past After since the start's reach
	b, _ = os.ReadFile(wd)
	time.Sleep(600 * time.Millisecond)
	after, _ := os.ReadFile(wd)
	if len(after) != len(b) {
		t.Errorf("pets went on after the node was isolated longer than After: %d then %d", len(b), len(after))
	}
	f.Observe(context.Background(), heartbeat.Reachability{Controller: true}, time.Now())
	time.Sleep(600 * time.Millisecond)
	f.Close(time.Now(), true, time.Minute)
	final, _ := os.ReadFile(wd)
	if len(final) < len(after)+2 || final[len(final)-1] != 'V' {
		t.Errorf("reached again: device holds %q after %q, want pets again and the magic close last", final, after)
	}
}

// An agent restarted in the same boot opens the watchdog at its start only where its own promise
// is no longer than the one the agent before it recorded; a self-fence of an agent that waits
// for a reach arms the watchdog only when the agent before it disarmed it (no timer of it runs),
// once per isolation, and the first reach adopts that device; the record says what each agent
// promised and whether it disarmed.
func TestWatchdogAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(5_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	dir := t.TempDir()
	wd, state := filepath.Join(dir, "watchdog"), filepath.Join(dir, "state")
	o := Config{Interval: interval, After: 2 * time.Second, WatchdogDevice: wd, WatchdogTimeout: 5 * time.Second, WatchdogStandIn: true,
		StateDir: state, BootID: "boot-1"}
	co := orders.Config{Timeout: time.Second, ReadBackWait: interval}
	written := func() string { t.Helper(); return holds(t, wd) }
	write := func(r reached) {
		t.Helper()
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(state, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(state, ReachedFile), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	read := func() reached {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(state, ReachedFile))
		if err != nil {
			t.Fatal(err)
		}
		var r reached
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	start := func(o Config, s float64, c *orders.Commander) *Fencer {
		t.Helper()
		return startAgent(t, wd, o, at(s), c)
	}
	beat := func(f *Fencer, c *orders.Commander, r heartbeat.Reachability, s float64) {
		f.Observe(ctx, r, at(s))
		c.Wait()
		f.petTick(at(s))
	}
	promised := func(r reached) bool { return r.AfterMillis == 2000 && r.TimeoutMillis == 5000 } // o's After and timeout

	// A first start records its promise at once.
	c := orders.NewCommander(co, logr.Discard())
	f := start(o, 0, c)
	if r := read(); !promised(r) || r.Disarmed || !r.Reached.Equal(at(0)) {
		t.Errorf("record after the first start = %+v, want the promise (2 s after, a 5 s timeout), reached at the start, not disarmed", r)
	}
	beat(f, c, heartbeat.Reachability{Controller: true}, 1)
	f.Close(at(1.1), true, interval)
	if r := read(); !r.Disarmed || r.AfterMillis != 0 || r.TimeoutMillis != 0 || !r.Reached.Equal(at(1)) {
		t.Errorf("record after a graceful disarm = %+v, want disarmed, no promise, the last reach kept", r)
	}

	// The agent before disarmed it; this one starts long into an isolation: its self-fence arms
	// the watchdog (one write), a retry in the same isolation does not write again, and the
	// first reach adopts the armed device and pets it.
	c = orders.NewCommander(co, logr.Discard())
	f = start(o, 20, c)
	if got := written(); got != "" {
		t.Errorf("restarted long into an isolation: device holds %q at the start, want nothing", got)
	}
	beat(f, c, heartbeat.Reachability{}, 20.5)
	if st := c.Status(); st == nil || !strings.HasPrefix(st.ID, "self-fence-") {
		t.Fatalf("no self-fence 0.5 s after a start 19 s into an isolation: %+v", st)
	}
	if got, within := written(), f.Within(); got != "1" || within != 0 {
		t.Errorf("self-fence after a disarm: device holds %q, Within %s; want armed (one write), no promise", got, within)
	}
	if r := read(); r.Disarmed || !r.Reached.Equal(at(1)) {
		t.Errorf("record at once after the self-fence armed the watchdog = %+v, want it no longer disarmed, the last reach kept", r)
	}
	// An agent started after this one died, before its next heartbeat, in the same isolation,
	// does not open it again.
	c2 := orders.NewCommander(co, logr.Discard())
	f2 := New(o, c2, logr.Discard(), at(20.6))
	f2.manualPets = true
	if err := f2.ArmWatchdog(); err != nil {
		t.Fatal(err)
	}
	f2.Observe(ctx, heartbeat.Reachability{}, at(21.1))
	c2.Wait()
	if st := c2.Status(); st == nil || !strings.HasPrefix(st.ID, "self-fence-") {
		t.Fatalf("the agent started after it did not self-fence: %+v", st)
	}
	if got := written(); got != "1" || f2.held != nil {
		t.Errorf("an agent started after the self-fence armed the watchdog opened it again (device %q, held %v): it would restart its timer", got, f2.held != nil)
	}
	held := f.held
	beat(f, c, heartbeat.Reachability{}, 31) // retryUnconfirmed later: the self-fence again
	if got := written(); got != "1" || f.held != held {
		t.Errorf("after a second self-fence in the isolation the device holds %q, want the one write (a second would restart its timer)", got)
	}
	beat(f, c, heartbeat.Reachability{Peers: true}, 32)
	if got, within := written(), f.Within(); got != "11" || within != 12*time.Second {
		t.Errorf("reached after the self-fence armed it: device holds %q, Within %s; want adopted and petted (\"11\"), 12s", got, within)
	}
	if r := read(); !promised(r) || r.Disarmed {
		t.Errorf("record after adopting = %+v, want the promise, not disarmed", r)
	}

	// The agent before left it armed (a crash): a self-fence of this one does not touch it.
	write(reached{BootID: "boot-1", Reached: at(40), AfterMillis: 2000, TimeoutMillis: 5000})
	c = orders.NewCommander(co, logr.Discard())
	f = start(o, 60, c)
	beat(f, c, heartbeat.Reachability{}, 60.5)
	if st := c.Status(); st == nil || !strings.HasPrefix(st.ID, "self-fence-") {
		t.Fatalf("no self-fence 0.5 s after a start 20 s into an isolation: %+v", st)
	}
	if got := written(); got != "" {
		t.Errorf("self-fence with the watchdog the agent before left armed: device holds %q, want nothing (a write restarts its timer)", got)
	}

	// Restarted 1 s into an isolation (within After): the same promise opens at once; a longer
	// one, or a record without one, waits for a reach, unless the agent before disarmed the
	// watchdog (it withdrew its promise first). Each of the two is compared on its own: the
	// first "longer self-fence-after" promises 2 s + 2×4 s = 10 s, less than the 12 s before.
	recorded := reached{BootID: "boot-1", Reached: at(70), AfterMillis: 2000, TimeoutMillis: 5000}
	disarmed := reached{BootID: "boot-1", Reached: at(70), Disarmed: true}
	for _, tc := range []struct {
		name    string
		before  reached
		after   time.Duration
		timeout time.Duration
		opened  bool
	}{
		{"the same timeout", recorded, 2 * time.Second, 5 * time.Second, true},
		{"a shorter timeout", recorded, 2 * time.Second, 3 * time.Second, true},
		{"a longer timeout", recorded, 2 * time.Second, 10 * time.Second, false},
		{"a longer self-fence-after, a shorter timeout", recorded, 4 * time.Second, 3 * time.Second, false},
		{"a record without a promise", reached{BootID: "boot-1", Reached: at(70)}, 2 * time.Second, 5 * time.Second, false},
		{"disarmed before, a longer timeout", disarmed, 2 * time.Second, 10 * time.Second, true},
	} {
		write(tc.before)
		oo := o
		oo.After, oo.WatchdogTimeout = tc.after, tc.timeout
		c = orders.NewCommander(co, logr.Discard())
		f = start(oo, 71, c)
		want := tc.after + 2*tc.timeout
		if opened := written() == "1" && f.Within() == want; opened != tc.opened {
			t.Errorf("%s: device holds %q, Within %s at the start; want opened %v", tc.name, written(), f.Within(), tc.opened)
		}
		beat(f, c, heartbeat.Reachability{API: true}, 71.2)
		if got := f.Within(); got != want {
			t.Errorf("%s: Within after a reach = %s, want %s", tc.name, got, want)
		}
		f.Close(at(71.3), false, interval)
	}
}

// holds is what was written to the stand-in watchdog device at path.
func holds(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startAgent starts an agent with o at now on an empty stand-in device wd, its pets by hand
// (petTick), and arms its watchdog; it promises nothing before.
func startAgent(t *testing.T, wd string, o Config, now time.Time, c Starter) *Fencer {
	t.Helper()
	if err := os.WriteFile(wd, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f := New(o, c, logr.Discard(), now)
	f.manualPets = true
	if got := f.Within(); got != 0 {
		t.Errorf("Within before the watchdog is armed = %s, want 0", got)
	}
	if err := f.ArmWatchdog(); err != nil {
		t.Fatal(err)
	}
	return f
}
