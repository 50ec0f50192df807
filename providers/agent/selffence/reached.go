package selffence

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"palisade.dev/palisade/providers/agent/pki"
)

// ReachedFile is the file, in the agent's state directory (--state-dir), where the agent records
// when its node was last reached, with the boot ID of that boot, so that an agent restarted in
// the middle of an isolation (a crash, an OOM kill, its container restarted by the kubelet)
// counts the isolation from the last reach, not from its restart: the heartbeats promised the
// controller that the node fences itself at the latest --self-fence-after plus its termination's
// time limit after it was last reached, and the controller's SelfFence method releases the
// node's pods on that promise.
const ReachedFile = "last-reached"

// persistEvery is how often, at most, a node reached at every heartbeat writes ReachedFile. The
// record can be that much older than the last reach, so an agent restarted while isolated may
// fence itself up to that much sooner than --self-fence-after after the last reach, never later.
const persistEvery = 5 * time.Second

// startGrace is how many heartbeat intervals an agent restarted with an old last reach waits
// before it fences itself: a peer path counts only once the peer's agent acknowledged one of its
// probes, which takes up to two intervals after the start (heartbeat's pathWindow), so a node
// that is reached is not taken for isolated at its first heartbeats.
const startGrace = 2

// reached is ReachedFile's content.
type reached struct {
	BootID  string    `json:"bootID"`
	Reached time.Time `json:"reached"`
	// AfterMillis and TimeoutMillis are the self-fence the agent promised when it wrote the
	// file: its --self-fence-after and its watchdog's timeout (the device's own), both 0 when
	// it promised nothing (or in a file written before the fields). An agent restarted in the
	// same boot with a longer one of either (a rollout of a longer --watchdog-timeout or
	// --self-fence-after while the node is isolated) does not open the watchdog before a reach
	// (ArmWatchdog): its pets and timeout would reset the node later than the controller was
	// promised. Each is compared on its own: a device may keep a timeout of its own.
	AfterMillis   int64 `json:"selfFenceAfterMillis,omitempty"`
	TimeoutMillis int64 `json:"watchdogTimeoutMillis,omitempty"`
	// Disarmed says the agent that wrote the file disarmed the watchdog at its graceful exit
	// (the magic close, Close): no timer of it runs, so an agent restarted in a long isolation
	// arms it at its self-fence (armAtSelfFence) rather than leave the node without the reset.
	Disarmed bool `json:"watchdogDisarmed,omitempty"`
}

// restore sets f.lastReachable from ReachedFile when it records a reach of this boot before now:
// the isolation then began at that reach. Without the file (a first start) or for another boot
// (the reboot stopped every container, and a kubelet that boots cut off from the API server
// starts no pod) it counts from now, as a first start does. An unreadable or malformed file, no
// boot ID to compare, or a reach after now (the clock went back) count as a reach long ago: the
// agent cannot know how long the node has been isolated, and a node isolated at its start (after
// startGrace) fences itself rather than later than promised.
func (f *Fencer) restore(now time.Time) {
	if f.o.StateDir == "" || !f.enabled() {
		return
	}
	path := filepath.Join(f.o.StateDir, ReachedFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var r reached
	if err == nil {
		err = json.Unmarshal(raw, &r)
	}
	if err == nil && r.Reached.IsZero() {
		err = errors.New("no reach recorded")
	}
	if err != nil {
		f.lastReachable, f.restored = time.Time{}, true
		f.log.Error(err, "the last-reached file cannot be read: counting the node as unreached since before this start, so that it fences itself if it is isolated now (fix or remove the file to count from this start)",
			"file", path)
		return
	}
	switch {
	case f.o.BootID == "" || r.Reached.After(now):
		// Unknown: this may be the same boot, and the reach long ago.
		f.lastReachable, f.restored = time.Time{}, true
		f.log.Info("the last reach recorded cannot be placed (no boot ID to compare, or a reach after now: the clock went back): counting the node as unreached since before this start, so that it fences itself if it is isolated now",
			"file", path, "recordedBootID", r.BootID, "reached", r.Reached)
	case r.BootID != f.o.BootID:
		f.log.Info("last reach recorded in another boot: counting isolation from this start", "file", path, "recordedBootID", r.BootID, "bootID", f.o.BootID)
	default:
		f.lastReachable, f.restored, f.before = r.Reached, true, r
		f.log.Info("restarted: counting isolation from the last reach recorded", "file", path, "reached", r.Reached.UTC().Format(time.RFC3339Nano),
			"ago", now.Sub(r.Reached).Round(time.Millisecond).String(), "selfFenceAfter", f.o.After.String())
	}
}

// persist records the reach at now in ReachedFile: the first, then at most every persistEvery,
// and always the first after a restart from a recorded reach (now is a newer one). A failure is
// logged: the agent still fences itself by the reach it holds in memory.
func (f *Fencer) persist(now time.Time, restored bool) {
	f.recMu.Lock()
	recent := !f.written.IsZero() && now.Sub(f.written) < persistEvery
	f.recMu.Unlock()
	if f.o.StateDir == "" || (!restored && recent) {
		return
	}
	f.record(f.promised(now), now)
}

// promised is the record of a reach at at with the promise this agent makes now.
func (f *Fencer) promised(at time.Time) reached {
	r := reached{BootID: f.o.BootID, Reached: at.UTC()}
	f.dogMu.Lock()
	defer f.dogMu.Unlock()
	if f.enabled() && f.dog != nil {
		r.AfterMillis, r.TimeoutMillis = f.o.After.Milliseconds(), f.dog.timeout.Milliseconds()
	}
	return r
}

// record writes r to ReachedFile at now (persist; Close's disarm; openDog's new promise).
func (f *Fencer) record(r reached, now time.Time) {
	if f.o.StateDir == "" {
		return
	}
	f.recMu.Lock()
	defer f.recMu.Unlock()
	raw, err := json.Marshal(r)
	if err == nil {
		err = os.MkdirAll(f.o.StateDir, 0o700)
	}
	if err == nil {
		err = pki.WriteFileAtomic(filepath.Join(f.o.StateDir, ReachedFile), raw)
	}
	if err != nil {
		if f.persistErr == nil {
			f.log.Error(fmt.Errorf("recording the last reach: %w", err), "an agent restarted while isolated would count its isolation from its restart, and fence itself later than --self-fence-after after the last reach",
				"dir", f.o.StateDir)
		}
		f.persistErr = err
		return
	}
	if f.persistErr != nil {
		f.log.Info("recording the last reach works again", "dir", f.o.StateDir)
	}
	f.persistErr, f.written = nil, now
}
