package selffence

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The petted watchdog (Config.WatchdogTimeout > 0). Armed only by a self-fence, a watchdog
// covers nothing while the agent runs, and an agent that stops (crashes, is killed, its pod
// gone) after its node was cut off fences nothing, though its heartbeats promised the controller
// that it would. Petted, it covers the agent itself, as sbd's and medik8s' self node remediation's
// do: the agent opens the device at its start and pets it at every heartbeat while its node is
// not isolated for longer than --self-fence-after; a node isolated longer, or whose agent stopped,
// is reset by the watchdog at the latest its timeout after the last pet. So the node is fenced
// at the latest --self-fence-after plus the watchdog's timeout after it was last reached, whether
// its agent runs or not, and that is what the heartbeats promise (Within). A graceful stop of the
// agent (SIGTERM: an upgrade of its DaemonSet) disarms the watchdog with the magic close, unless
// its node is isolated; a crash leaves it armed, and the node is reset unless the agent is
// started again within the timeout.

// watchdog is an open watchdog device, petted by writes.
type watchdog struct {
	file    *os.File
	path    string
	timeout time.Duration // the device's own, or Config.WatchdogTimeout when it cannot say
	// note says how the timeout was found, for the agent's log.
	note string
	// closed is set by Fencer.Close, on the heartbeats' goroutine, after their last pet.
	closed bool
}

// openWatchdog opens path and sets its timeout (WDIOC_SETTIMEOUT, whole seconds, rounded up),
// then reads back the timeout the device took (a driver may round it, or not set it at all): the
// promise counts the device's own. A file that is no watchdog device (no such ioctl: a test's
// stand-in) keeps timeout, and says so.
func openWatchdog(path string, timeout time.Duration) (*watchdog, error) {
	file, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the watchdog device: %w", err)
	}
	w := &watchdog{file: file, path: path, timeout: timeout}
	fd := int(file.Fd())
	secs := int((timeout + time.Second - 1) / time.Second)
	setErr := unix.IoctlSetPointerInt(fd, unix.WDIOC_SETTIMEOUT, secs)
	got, getErr := unix.IoctlGetInt(fd, unix.WDIOC_GETTIMEOUT)
	switch {
	case getErr == nil && got > 0:
		w.timeout = time.Duration(got) * time.Second
		w.note = fmt.Sprintf("the device's timeout, %ds", got)
		if setErr != nil {
			w.note += fmt.Sprintf(" (setting %ds failed: %v)", secs, setErr)
		}
	case errors.Is(getErr, unix.ENOTTY) && errors.Is(setErr, unix.ENOTTY):
		w.note = "not a watchdog device (no WDIOC_GETTIMEOUT): counting --watchdog-timeout"
	default:
		_ = file.Close()
		return nil, fmt.Errorf("the watchdog device %s does not say its timeout (setting %ds: %v; reading it: %v): without it the agent cannot promise when its node is reset", path, secs, setErr, getErr)
	}
	return w, w.pet()
}

// pet restarts the watchdog's timer.
func (w *watchdog) pet() error {
	if _, err := w.file.Write([]byte{'1'}); err != nil {
		return fmt.Errorf("petting the watchdog device %s: %w", w.path, err)
	}
	return nil
}

// disarm stops the watchdog with the magic close ('V', then close): a driver built with
// nowayout ignores it and resets the node unless another agent opens and pets it in time.
func (w *watchdog) disarm() error {
	_, err := w.file.Write([]byte{'V'})
	if cerr := w.file.Close(); err == nil {
		err = cerr
	}
	return err
}
