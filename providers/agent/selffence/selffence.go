package selffence

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/detectors/heartbeat"
)

// Fencer fences its own node, when self-fencing is on (Config.After > 0), once the node is
// isolated: for longer than Config.After,
//
//	(a) the controller accepted none of its heartbeats (a refused one is no signal there),
//	(b) the API server's healthz (--api-server-healthz, probed every interval alongside the
//	    kubelet check) has not answered 200 while the kubelet answered healthy, and
//	(c) no peer's agent acknowledged one of its probes (--probe-address) within two intervals,
//	    so that a node cut off from the control plane only, but not from its peers, does not
//	    fence itself: each is a path the controller hears (detectors/heartbeat.Reachability).
//
// Once per isolation (it is re-armed only when the controller, the API server or a peer is
// reached again), the agent then runs the same executor path as a Terminate command, with the ID
// "self-fence-<unix time>" and no grace cap (each pod's own grace period, bounded by
// --executor-timeout): the kubelet stop command, child.TerminateAll, the read-back. With a
// petted watchdog (Config.WatchdogTimeout, watchdog.go) the pets have stopped already, and the
// watchdog resets the node its timeout after the last (an agent restarted in the isolation that
// has not opened it arms it then when the agent before it disarmed it: armAtSelfFence);
// without one, whatever the outcome, if --watchdog-device is set, it opens the device, writes
// one byte (arming the watchdog and starting its timer) and never writes again, so that the
// hardware watchdog reboots the node (the controller does not rely on such an agent: Within).
// Its ExecutorStatus stays the Commander's current status, so that the first heartbeat the
// controller accepts again reports it (Confirmed or Failed).
type Fencer struct {
	o    Config
	cmds Starter
	log  logr.Logger
	api  *http.Client

	lastReachable time.Time // when the controller, the API server or a peer was last reached
	fenced        bool      // a self-fence was started in this isolation
	fencedAt      time.Time // when it was started
	started       time.Time // when the agent started (New)
	restored      bool      // lastReachable is from ReachedFile (or unknown): a restart while isolated
	// recMu guards written and persistErr: ReachedFile is written from the heartbeat loop and
	// from the executor's goroutine (armAtSelfFence).
	recMu      sync.Mutex
	written    time.Time // when ReachedFile was last written
	persistErr error     // the last failure to write it, nil after a success
	// unconfirmed is set when a self-fence ended without its workload read back stopped (the
	// kubelet not stopped, the runtime not reached): a heartbeat of the same isolation at least
	// retryUnconfirmed after it tries again, since the controller relies on it having happened.
	unconfirmed  atomic.Bool
	apiReachable *bool // nil until the first probe, for logging changes
	// before is what ReachedFile said of the agent before this one, when restored from it
	// with a reach of this boot (restore); zero otherwise.
	before reached
	// dogMu guards dog, armLater and held: the heartbeat loop opens the watchdog (openDog),
	// the executor's goroutine arms it at a self-fence (armAtSelfFence).
	dogMu sync.Mutex
	// dog is the petted watchdog once opened (ArmWatchdog, or the first reach after a start in
	// an isolation: armLater), nil before and without one.
	dog      *watchdog
	armLater bool
	// held is the watchdog a self-fence of an agent waiting for a reach opened and armed, never
	// petted (armAtSelfFence): the first reach adopts it as dog (a second open would fail, busy).
	held *watchdog
	// petUntil is lastReachable plus After, in nanoseconds after started (petUnknown: no reach
	// known): the pet loop pets while it is not past it, on the monotonic clock (a clock stepped
	// back during an isolation must not stretch the pets).
	petUntil atomic.Int64
	// manualPets (tests) starts no pet loop: petTick pets.
	manualPets bool
}

// Config is when the node fences itself and how it ends.
type Config struct {
	// After is --self-fence-after: isolated longer than this, the node fences itself; 0 never.
	After time.Duration
	// APIServerHealthz is the URL probed for the API server's reachability ("": unreachable).
	APIServerHealthz string
	// WatchdogDevice is armed and never petted after a self-fence ("": none).
	WatchdogDevice string
	// Interval is the heartbeat interval: a probe's timeout is half of it.
	Interval time.Duration
	// StateDir is --state-dir, where the last reach is recorded (ReachedFile); "" keeps it in
	// memory only, and a restarted agent counts its isolation from its start.
	StateDir string
	// BootID is the node's boot ID: a reach recorded in another boot is not counted.
	BootID string
	// WatchdogTimeout, when not zero, pets WatchdogDevice from the agent's start (ArmWatchdog)
	// while the node is not isolated for longer than After (watchdog.go), and is the timeout
	// set on it; zero arms the device only after a self-fence.
	WatchdogTimeout time.Duration
	// WatchdogStandIn (tests only) accepts a WatchdogDevice without the watchdog ioctls (a
	// file or FIFO standing in for one), counting WatchdogTimeout as its timeout.
	WatchdogStandIn bool
}

// Starter starts a self-fence as order id on the Terminate path and calls after with its final
// status; false when it started nothing (an order runs, or id ran before).
type Starter interface {
	StartSelfFence(ctx context.Context, id string, after func(agentwire.ExecutorStatus)) bool
}

// New returns a Fencer that counts the node reachable at now, or, when Config.StateDir records a
// reach in this boot (ReachedFile), at that reach: an agent restarted while isolated fences
// itself by the time it promised before its restart.
func New(o Config, cmds Starter, log logr.Logger, now time.Time) *Fencer {
	// A reachability probe only: nothing is sent but a GET, and nothing read from the answer
	// but its status, so the API server's certificate is not verified.
	tr := &http.Transport{Proxy: nil, MaxIdleConns: 1, IdleConnTimeout: 4 * o.Interval,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // reachability probe only, see above
	f := &Fencer{o: o, cmds: cmds, log: log.WithName("self-fence"), api: &http.Client{Transport: tr}, lastReachable: now, started: now}
	f.restore(now)
	f.setPetUntil()
	return f
}

// retryUnconfirmed is how long after a self-fence that did not confirm the workload stopped the
// agent tries again while still isolated.
const retryUnconfirmed = 10 * time.Second

// enabled says whether self-fencing is on.
func (f *Fencer) enabled() bool { return f != nil && f.o.After > 0 }

// Within is how long after the node was last reached it has fenced itself at the latest, the
// heartbeats' report of it (the controller's SelfFence method relies on nothing longer): After
// plus twice the petted watchdog's timeout. The last pet comes at the latest After after the
// last reach, whether the agent runs on (and fences itself then) or stops (crashes, is killed),
// and the watchdog resets the node its timeout later, whatever the termination achieved (a
// kubelet left running, k3s's, restarts what it stopped; a reset node's kubelet, cut off from
// the API server, starts no pod) — or, when the agent dies after its last pet, its timeout after
// the death: the kernel pings a watchdog whose device is closed without the magic character
// (watchdog_release), and a death comes at the latest one timeout after the last pet, or the
// node was reset already. An agent started again in the isolation does not open the device
// (armLater), so no later death pings it again; it arms it at its self-fence only when the agent
// before it disarmed it, which it does only once the controller took back its promise (Close).
//
// 0 when self-fencing is off or without a petted watchdog (Config.WatchdogTimeout 0, or not
// opened yet): the self-fence's termination then happens only while the agent runs, and an
// agent that stops after its node was cut off fences nothing, so the controller must not rely on
// its silence. Measured on real machines (the chaos regression self-fence-agent-killed-isolated):
// an agent killed 3 s into its node's isolation, the controller relying on its termination
// alone released a pod that still wrote.
func (f *Fencer) Within() time.Duration {
	if !f.enabled() {
		return 0
	}
	f.dogMu.Lock()
	defer f.dogMu.Unlock()
	if f.dog == nil {
		return 0
	}
	return f.o.After + 2*f.dog.timeout
}

// ArmWatchdog opens WatchdogDevice and pets it from now on, when WatchdogTimeout is set and
// self-fencing is on; its failure is the agent's (a device named but not usable). An agent
// restarted in the same boot (restored from ReachedFile) does not open it before the node is
// reached again (armLater) when
//
//   - the node has been isolated longer than After since before this start, or for a time it
//     cannot know: opening would restart the timer of a watchdog the agent before it left armed;
//   - or its --self-fence-after or --watchdog-timeout is longer than the agent before it
//     recorded (a rollout of a longer one, or a record without them), unless that agent disarmed
//     the watchdog (it withdrew its promise first): its pets and its timeout could reset the
//     node later than the promise the controller holds. Each is compared on its own (the
//     timeout asked for against the device's own the agent before had: a device may keep a
//     timeout of its own, and rounds alike for both agents).
func (f *Fencer) ArmWatchdog() error {
	if !f.enabled() || f.o.WatchdogTimeout <= 0 || f.o.WatchdogDevice == "" {
		return nil
	}
	beforeAfter, beforeTimeout := time.Duration(f.before.AfterMillis)*time.Millisecond, time.Duration(f.before.TimeoutMillis)*time.Millisecond
	switch {
	case !f.mayPet(f.started):
		f.setArmLater()
		f.log.Info("the node has been isolated longer than --self-fence-after since before this start (or for a time unknown): the watchdog is neither opened nor petted before the node is reached again, and one the agent before left armed resets the node",
			"device", f.o.WatchdogDevice, "disarmedBefore", f.before.Disarmed)
		return nil
	case f.restored && !f.before.Disarmed && (f.o.After > beforeAfter || f.o.WatchdogTimeout > beforeTimeout):
		// (An agent before that disarmed the watchdog withdrew its promise first: nothing to
		// keep.)
		f.setArmLater()
		f.log.Info("restarted with a self-fence promise longer than the agent before this one recorded: the watchdog is neither opened nor petted before the node is reached again (its timer runs as the agent before left it), so that the node is not reset later than the controller was promised",
			"device", f.o.WatchdogDevice, "selfFenceAfterBefore", beforeAfter.String(), "watchdogTimeoutBefore", beforeTimeout.String(),
			"selfFenceAfter", f.o.After.String(), "watchdogTimeout", f.o.WatchdogTimeout.String())
		return nil
	}
	return f.openDog()
}

func (f *Fencer) setArmLater() {
	f.dogMu.Lock()
	f.armLater = true
	f.dogMu.Unlock()
}

// openDog opens the watchdog, or adopts the one a self-fence armed (held), and, unless
// manualPets, starts the pet loop; the promise is recorded at once (ReachedFile).
func (f *Fencer) openDog() error {
	f.dogMu.Lock()
	dog, err, adopted := f.held, error(nil), f.held != nil
	if dog == nil {
		dog, err = openWatchdog(f.o.WatchdogDevice, f.o.WatchdogTimeout, f.o.WatchdogStandIn)
	}
	if err != nil {
		f.dogMu.Unlock()
		return err
	}
	f.dog, f.armLater, f.held = dog, false, nil
	f.dogMu.Unlock()
	if !f.manualPets {
		dog.start(f.mayPet, f.log)
	}
	if !f.lastReachable.IsZero() {
		f.record(f.promised(f.lastReachable), f.lastReachable)
	}
	f.log.Info("watchdog armed and petted while the node is reached: the node is reset once it is isolated longer than --self-fence-after, or once this agent stops without a graceful exit, plus the watchdog's timeout (twice it when the agent dies after its last pet)",
		"device", dog.path, "timeout", dog.timeout.String(), "timeoutFrom", dog.note, "selfFenceWithin", f.Within().String(), "adoptedFromSelfFence", adopted)
	return nil
}

// petUnknown is petUntil when no reach is known.
const petUnknown = math.MinInt64

// setPetUntil records lastReachable plus After for the pet loop, as an offset from started
// (monotonic when both come from the clock; a restored reach has only its wall time).
func (f *Fencer) setPetUntil() {
	if f.lastReachable.IsZero() {
		f.petUntil.Store(petUnknown)
		return
	}
	f.petUntil.Store(int64(f.lastReachable.Add(f.o.After).Sub(f.started)))
}

// reachOf is the last reach as the pet loop counts it (petUntil less After), safe to read from
// any goroutine; zero when none is known.
func (f *Fencer) reachOf() time.Time {
	u := f.petUntil.Load()
	if u == petUnknown {
		return time.Time{}
	}
	return f.started.Add(time.Duration(u) - f.o.After).UTC()
}

// mayPet says whether the watchdog may be petted at now: the node was reached at most After
// before.
func (f *Fencer) mayPet(now time.Time) bool {
	u := f.petUntil.Load()
	return u != petUnknown && int64(now.Sub(f.started)) <= u
}

// petTick is one pass of the pet loop at now (tests call it with manualPets).
func (f *Fencer) petTick(now time.Time) {
	f.dogMu.Lock()
	dog := f.dog
	f.dogMu.Unlock()
	if dog != nil && f.mayPet(now) {
		dog.petLogged(f.log)
	}
}

// Close ends the petting at the agent's graceful exit: the magic close disarms the watchdog
// when the controller took the agent's farewell heartbeat, which withdraws the self-fence
// promise (withdrawn), and the node was reached within the last two heartbeat intervals (interval:
// the one in force, which a policy may lengthen), and within After
// (an upgrade of the agent must not reset the node); otherwise the watchdog stays armed, so that
// the node is reset as promised unless an agent started again pets it in time: the controller
// may still rely on the promise of a node isolated, or whose controller did not hear the
// withdrawal.
func (f *Fencer) Close(now time.Time, withdrawn bool, interval time.Duration) {
	f.dogMu.Lock()
	dog := f.dog
	f.dogMu.Unlock()
	if dog == nil {
		return
	}
	dog.halt()
	switch isolated := now.Sub(f.lastReachable); {
	case f.fenced || f.lastReachable.IsZero() || isolated > min(2*max(interval, f.o.Interval), f.o.After):
		f.log.Info("stopping while the node is isolated: the watchdog stays armed and unpetted", "device", dog.path,
			"isolatedFor", isolated.Round(time.Millisecond).String(), "timeout", dog.timeout.String())
		return // the process's exit closes the device without the magic character
	case !withdrawn:
		f.log.Info("stopping without the controller taking back the self-fence promise: the watchdog stays armed and unpetted, and resets the node unless an agent pets it in time",
			"device", dog.path, "timeout", dog.timeout.String())
		return
	}
	if err := dog.disarm(); err != nil {
		f.log.Error(err, "disarming the watchdog (magic close) failed: the node may be reset unless an agent pets it within its timeout", "device", dog.path)
		return
	}
	// The next agent promises anew, and may arm the watchdog at a self-fence (armAtSelfFence).
	f.record(reached{BootID: f.o.BootID, Reached: f.lastReachable.UTC(), Disarmed: true}, now)
	f.log.Info("watchdog disarmed (magic close)", "device", dog.path)
}

// ProbeAPIServer GETs --api-server-healthz with a timeout of half the interval: only 200 counts
// as reachable. Without a URL the API server counts as unreachable.
func (f *Fencer) ProbeAPIServer(parent context.Context) bool {
	if !f.enabled() || f.o.APIServerHealthz == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(parent, f.o.Interval/2)
	defer cancel()
	ok, detail := false, ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.o.APIServerHealthz, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = f.api.Do(req); err == nil {
			ok, detail = resp.StatusCode == http.StatusOK, resp.Status
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
		}
	}
	if err != nil {
		detail = err.Error()
	}
	if parent.Err() == nil && (f.apiReachable == nil || *f.apiReachable != ok) {
		f.apiReachable = &ok
		if ok {
			f.log.Info("API server reachable", "url", f.o.APIServerHealthz)
		} else {
			f.log.Info("API server unreachable", "url", f.o.APIServerHealthz, "detail", detail)
		}
	}
	return ok
}

// Observe is called once per heartbeat with what it found, and starts the self-fence when the
// node has been isolated for longer than --self-fence-after.
func (f *Fencer) Observe(ctx context.Context, r heartbeat.Reachability, now time.Time) {
	if !f.enabled() || ctx.Err() != nil {
		return
	}
	if r.Controller || r.API || r.Peers {
		if f.fenced {
			f.log.Info("reachable again after self-fencing: self-fencing re-armed", "controllerReachable", r.Controller, "apiServerReachable", r.API, "peersReachable", r.Peers)
		}
		f.persist(now, f.restored)
		f.lastReachable, f.fenced, f.restored = now, false, false
		f.setPetUntil()
		if f.armLater {
			if err := f.openDog(); err != nil {
				f.dogMu.Lock()
				f.armLater = false // said once: this agent promises no self-fence
				f.dogMu.Unlock()
				f.log.Error(err, "opening the watchdog at the first reach failed: this agent promises no self-fence")
			}
		}
		return
	}
	if f.fenced && now.Sub(f.fencedAt) >= retryUnconfirmed && f.unconfirmed.Swap(false) {
		f.fenced = false
		f.log.Info("the self-fence did not confirm the workload stopped: self-fencing again", "after", now.Sub(f.fencedAt).String())
	}
	isolated := now.Sub(f.lastReachable)
	if f.fenced || isolated <= f.o.After {
		return
	}
	if f.restored && now.Sub(f.started) < startGrace*f.o.Interval {
		return // a peer's acknowledgement may be on its way (startGrace)
	}
	id := fmt.Sprintf("self-fence-%d", now.Unix())
	if !f.cmds.StartSelfFence(ctx, id, f.watchdog) {
		f.log.Info("isolated, but a command is running: self-fencing on a later heartbeat", "isolatedFor", isolated.String())
		return
	}
	f.fenced, f.fencedAt = true, now
	isolatedFor := isolated.String()
	if f.lastReachable.IsZero() {
		isolatedFor = "unknown (the last-reached file could not be read)"
	}
	f.log.Error(errors.New("node isolated"), "SELF-FENCING: neither the controller, the API server nor any peer has been reachable: stopping the kubelet and terminating every pod",
		"command", id, "isolatedFor", isolatedFor, "selfFenceAfter", f.o.After.String(),
		"apiServerHealthz", f.o.APIServerHealthz, "watchdogDevice", f.o.WatchdogDevice)
}

// watchdogFiles holds the opened watchdog devices for the life of the process: the device is
// never written again, nor closed (a close, or the garbage collector's, is not needed to keep it
// armed, but a driver without "nowayout" would take a magic close as "stop").
var (
	watchdogMu    sync.Mutex
	watchdogFiles []*os.File
)

// watchdog is the last step of a self-fence: open --watchdog-device (which arms a hardware
// watchdog), write one byte, and stop petting it, so that it reboots the node.
func (f *Fencer) watchdog(st agentwire.ExecutorStatus) {
	if st.State != agentwire.ExecutorConfirmed {
		f.unconfirmed.Store(true)
	}
	if f.o.WatchdogTimeout > 0 {
		if f.armAtSelfFence(st) {
			return
		}
		// Petted (or left armed by the agent before, and not opened): the device is not touched,
		// since a write would restart its timer.
		f.log.Error(errors.New("watchdog no longer petted"), "SELF-FENCING: the watchdog is no longer petted: the node will be reset within its timeout",
			"device", f.o.WatchdogDevice, "timeout", f.o.WatchdogTimeout.String(), "command", st.ID, "state", st.State)
		return
	}
	if f.o.WatchdogDevice == "" {
		return
	}
	file, err := os.OpenFile(f.o.WatchdogDevice, os.O_WRONLY, 0)
	if err == nil {
		_, err = file.Write([]byte{'1'}) // anything but the magic 'V'
		watchdogMu.Lock()
		watchdogFiles = append(watchdogFiles, file)
		watchdogMu.Unlock()
	}
	if err != nil {
		f.log.Error(err, "SELF-FENCING: cannot arm the watchdog", "device", f.o.WatchdogDevice, "command", st.ID, "state", st.State)
		return
	}
	f.log.Error(errors.New("watchdog armed"), "SELF-FENCING: watchdog armed and no longer petted: the node will reboot",
		"device", f.o.WatchdogDevice, "command", st.ID, "state", st.State)
}

// armAtSelfFence arms the watchdog at a self-fence of an agent that has not opened it (armLater:
// restarted in a long isolation) when the agent before it disarmed it at a graceful exit
// (reached.Disarmed): no timer of it runs, so nothing else would reset the node. The device is
// opened (its timeout set, one write starting the timer) and held, never petted (held); the
// first reach adopts it (openDog). A watchdog the agent before left armed (a crash, an exit
// while isolated) is not touched: opening it would restart the timer behind that agent's
// promise. It says whether it handled the watchdog.
func (f *Fencer) armAtSelfFence(st agentwire.ExecutorStatus) bool {
	f.dogMu.Lock()
	defer f.dogMu.Unlock()
	if f.dog != nil || !f.armLater || !f.before.Disarmed {
		return false
	}
	if f.held != nil {
		return true // armed by a self-fence before in this isolation: a write would restart it
	}
	dog, err := openWatchdog(f.o.WatchdogDevice, f.o.WatchdogTimeout, f.o.WatchdogStandIn)
	if err != nil {
		f.log.Error(err, "SELF-FENCING: cannot arm the watchdog the agent before this one disarmed", "device", f.o.WatchdogDevice, "command", st.ID, "state", st.State)
		return true
	}
	f.held = dog
	// Recorded at once as no longer disarmed, so that an agent started after this one dies (a
	// crash loop) does not open it again, restarting its timer.
	f.record(reached{BootID: f.o.BootID, Reached: f.reachOf()}, time.Now())
	f.log.Error(errors.New("watchdog armed"), "SELF-FENCING: the watchdog the agent before this one disarmed is armed again and never petted: the node will be reset within its timeout",
		"device", dog.path, "timeout", dog.timeout.String(), "command", st.ID, "state", st.State)
	return true
}
