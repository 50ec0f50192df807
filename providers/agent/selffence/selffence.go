package selffence

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
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
// --executor-timeout): the kubelet stop command, child.TerminateAll, the read-back. Then, whatever
// the outcome, if --watchdog-device is set, it opens the device, writes one byte (arming the
// watchdog and starting its timer) and never writes again, so that the hardware watchdog
// reboots the node. Its ExecutorStatus stays the Commander's current status, so that the first
// heartbeat the controller accepts again reports it (Confirmed or Failed).
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
	written       time.Time // when ReachedFile was last written
	persistErr    error     // the last failure to write it, nil after a success
	// unconfirmed is set when a self-fence ended without its workload read back stopped (the
	// kubelet not stopped, the runtime not reached): a heartbeat of the same isolation at least
	// retryUnconfirmed after it tries again, since the controller relies on it having happened.
	unconfirmed  atomic.Bool
	apiReachable *bool // nil until the first probe, for logging changes
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
	// TerminateWithin is the time limit of the self-fence's termination (--executor-timeout);
	// 0 when the agent has no container runtime (--cri-endpoint) to stop the workload with, or
	// no kubelet stop command (the kubelet would start the containers again).
	TerminateWithin time.Duration
	// StateDir is --state-dir, where the last reach is recorded (ReachedFile); "" keeps it in
	// memory only, and a restarted agent counts its isolation from its start.
	StateDir string
	// BootID is the node's boot ID: a reach recorded in another boot is not counted.
	BootID string
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
	return f
}

// retryUnconfirmed is how long after a self-fence that did not confirm the workload stopped the
// agent tries again while still isolated.
const retryUnconfirmed = 10 * time.Second

// enabled says whether self-fencing is on.
func (f *Fencer) enabled() bool { return f != nil && f.o.After > 0 }

// Within is how long after the node was last reached it has fenced itself at the latest: After
// plus the termination's time limit, the heartbeats' report of it (the controller's SelfFence
// method relies on nothing longer). 0 when self-fencing is off, or when the agent cannot stop
// the workload for good (no runtime, or no kubelet stop command: Config.TerminateWithin 0): the
// watchdog alone reboots the node after a time this agent does not know.
func (f *Fencer) Within() time.Duration {
	if !f.enabled() || f.o.TerminateWithin <= 0 {
		return 0
	}
	return f.o.After + f.o.TerminateWithin
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
