package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
)

// Self-fencing. An agent started with --self-fence-after > 0 fences its own node when it is
// isolated: for longer than --self-fence-after,
//
//	(a) the controller accepted none of its heartbeats (a heartbeat the controller answers with
//	    a refusal also counts as the controller being reachable: it is not isolation), and
//	(b) the API server's healthz (--api-server-healthz, probed every interval alongside the
//	    kubelet check) has not answered 200, and
//	(c) no peer it probes (--probe-address) answered within two intervals, so that a node cut
//	    off from the control plane only, but not from its peers, does not fence itself.
//
// Once per isolation (it is re-armed only when the controller, the API server or a peer is
// reached again), the agent then runs the same executor path as a Terminate command, with the ID
// "self-fence-<unix time>" and no grace cap (each pod's own grace period, bounded by
// --executor-timeout): the kubelet stop command, terminateAll, the read-back. Then, whatever
// the outcome, if --watchdog-device is set, it opens the device, writes one byte (arming the
// watchdog and starting its timer) and never writes again, so that the hardware watchdog
// reboots the node. Its ExecutorStatus stays the commander's current status, so that the first
// heartbeat the controller accepts again reports it (Confirmed or Failed).
type selfFencer struct {
	o    options
	cmds *commander
	log  logr.Logger
	api  *http.Client

	lastReachable time.Time // when the controller or the API server was last reached
	fenced        bool      // a self-fence was started in this isolation
	apiReachable  *bool     // nil until the first probe, for logging changes
}

func newSelfFencer(o options, cmds *commander, log logr.Logger, now time.Time) *selfFencer {
	// A reachability probe only: nothing is sent but a GET, and nothing read from the answer
	// but its status, so the API server's certificate is not verified.
	tr := &http.Transport{Proxy: nil, MaxIdleConns: 1, IdleConnTimeout: 4 * o.interval,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // reachability probe only, see above
	return &selfFencer{o: o, cmds: cmds, log: log.WithName("self-fence"), api: &http.Client{Transport: tr}, lastReachable: now}
}

// enabled says whether self-fencing is on.
func (f *selfFencer) enabled() bool { return f != nil && f.o.selfFenceAfter > 0 }

// probeAPIServer GETs --api-server-healthz with a timeout of half the interval: only 200 counts
// as reachable. Without a URL the API server counts as unreachable.
func (f *selfFencer) probeAPIServer(parent context.Context) bool {
	if !f.enabled() || f.o.apiServerHealthz == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(parent, f.o.interval/2)
	defer cancel()
	ok, detail := false, ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.o.apiServerHealthz, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = f.api.Do(req); err == nil {
			ok, detail = resp.StatusCode == http.StatusOK, resp.Status
			discard(resp.Body)
		}
	}
	if err != nil {
		detail = err.Error()
	}
	if parent.Err() == nil && (f.apiReachable == nil || *f.apiReachable != ok) {
		f.apiReachable = &ok
		if ok {
			f.log.Info("API server reachable", "url", f.o.apiServerHealthz)
		} else {
			f.log.Info("API server unreachable", "url", f.o.apiServerHealthz, "detail", detail)
		}
	}
	return ok
}

// observe is called once per heartbeat with what it found, and starts the self-fence when the
// node has been isolated for longer than --self-fence-after.
// reachability is what one heartbeat round found reachable from this node.
type reachability struct {
	controller, api, peers bool
}

func (f *selfFencer) observe(ctx context.Context, r reachability, now time.Time) {
	if !f.enabled() || ctx.Err() != nil {
		return
	}
	if r.controller || r.api || r.peers {
		if f.fenced {
			f.log.Info("reachable again after self-fencing: self-fencing re-armed", "controllerReachable", r.controller, "apiServerReachable", r.api, "peersReachable", r.peers)
		}
		f.lastReachable, f.fenced = now, false
		return
	}
	isolated := now.Sub(f.lastReachable)
	if f.fenced || isolated <= f.o.selfFenceAfter {
		return
	}
	id := fmt.Sprintf("self-fence-%d", now.Unix())
	if !f.cmds.startSelfFence(ctx, id, f.watchdog) {
		f.log.Info("isolated, but a command is running: self-fencing on a later heartbeat", "isolatedFor", isolated.String())
		return
	}
	f.fenced = true
	f.log.Error(errors.New("node isolated"), "SELF-FENCING: neither the controller, the API server nor any peer has been reachable: stopping the kubelet and terminating every pod",
		"command", id, "isolatedFor", isolated.String(), "selfFenceAfter", f.o.selfFenceAfter.String(),
		"apiServerHealthz", f.o.apiServerHealthz, "watchdogDevice", f.o.watchdogDevice)
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
func (f *selfFencer) watchdog(st agentwire.ExecutorStatus) {
	if f.o.watchdogDevice == "" {
		return
	}
	file, err := os.OpenFile(f.o.watchdogDevice, os.O_WRONLY, 0)
	if err == nil {
		_, err = file.Write([]byte{'1'}) // anything but the magic 'V'
		watchdogMu.Lock()
		watchdogFiles = append(watchdogFiles, file)
		watchdogMu.Unlock()
	}
	if err != nil {
		f.log.Error(err, "SELF-FENCING: cannot arm the watchdog", "device", f.o.watchdogDevice, "command", st.ID, "state", st.State)
		return
	}
	f.log.Error(errors.New("watchdog armed"), "SELF-FENCING: watchdog armed and no longer petted: the node will reboot",
		"device", f.o.watchdogDevice, "command", st.ID, "state", st.State)
}

// startSelfFence starts a self-fence as command id on the Terminate command's executor path,
// then calls after with its final status. It returns false, starting nothing, when a command
// runs or id was started before.
func (c *commander) startSelfFence(ctx context.Context, id string, after func(agentwire.ExecutorStatus)) bool {
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
		if st := c.status(); st != nil && after != nil {
			after(*st)
		}
	})
	return true
}
