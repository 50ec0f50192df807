package selffence

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// The petted watchdog (Config.WatchdogTimeout > 0). Armed only by a self-fence, a watchdog
// covers nothing while the agent runs, and an agent that stops (crashes, is killed, its pod
// gone) after its node was cut off fences nothing, though its heartbeats promised the controller
// that it would. Petted, it covers the agent itself, as sbd's and medik8s' self node remediation's
// do: the agent opens the device at its start and a loop of its own pets it (every quarter of
// the timeout, at least once a second, whatever the heartbeat interval) while its node was reached
// at most --self-fence-after ago; a node isolated longer, or whose agent stopped, is reset by the
// watchdog its timeout after the last pet — or, when the agent dies after the last pet, its
// timeout after the death, since the kernel pings a watchdog closed without the magic character
// (Fencer.Within promises twice the timeout). A graceful stop of the agent (SIGTERM: an upgrade
// of its DaemonSet) first withdraws the promise (a farewell heartbeat) and then disarms the
// watchdog with the magic close, unless its node is isolated or the controller did not take the
// farewell; a crash leaves it armed, and the node is reset unless the agent is started again in
// time. Only one process may hold a watchdog device: systemd's RuntimeWatchdogSec or a watchdog
// daemon holding it makes the open fail (EBUSY), and the agent with it.

// watchdog is an open watchdog device, petted by writes.
type watchdog struct {
	file    *os.File
	path    string
	timeout time.Duration // the device's own, or Config.WatchdogTimeout for a stand-in
	// note says how the timeout was found, for the agent's log.
	note string

	stop, done chan struct{} // the pet loop's (start), nil without one
	petErr     error         // the last failure to pet, nil after a success (the loop's)
}

// openWatchdog opens path and sets its timeout (WDIOC_SETTIMEOUT, whole seconds, rounded up),
// then reads back the timeout the device took (a driver may round it, or not set it at all): the
// promise counts the device's own. A file that is no watchdog device (no such ioctls) is refused
// unless standIn (tests: a file or FIFO standing in for one, counting timeout). A device opened
// but refused is closed with the magic character first, so that the refusal does not leave it
// armed.
func openWatchdog(path string, timeout time.Duration, standIn bool) (*watchdog, error) {
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
	case errors.Is(getErr, unix.ENOTTY) && errors.Is(setErr, unix.ENOTTY) && standIn:
		w.note = "a stand-in without watchdog ioctls (--watchdog-stand-in): counting --watchdog-timeout"
	case errors.Is(getErr, unix.ENOTTY) && errors.Is(setErr, unix.ENOTTY):
		_ = w.disarm()
		return nil, fmt.Errorf("%s is not a watchdog device (it has no watchdog ioctls): nothing would reset the node, so the agent would promise a self-fence with nothing behind it (a hardware watchdog, or the softdog module's /dev/watchdog)", path)
	default:
		_ = w.disarm()
		return nil, fmt.Errorf("the watchdog device %s does not say its timeout (setting %ds: %v; reading it: %v): without it the agent cannot promise when its node is reset", path, secs, setErr, getErr)
	}
	if err := w.pet(); err != nil {
		_ = w.disarm() // not left armed by an agent that will not pet it
		return nil, err
	}
	return w, nil
}

// start runs the pet loop: every quarter of the timeout (between 100 ms and a second) it pets
// while may says so.
func (w *watchdog) start(may func(time.Time) bool, log logr.Logger) {
	every := min(max(w.timeout/4, 100*time.Millisecond), time.Second)
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
				if may(time.Now()) { // now, not the tick's time: a late tick must not pet past it
					w.petLogged(log)
				}
			}
		}
	}()
}

// halt stops the pet loop and waits for it.
func (w *watchdog) halt() {
	if w.stop != nil {
		close(w.stop)
		<-w.done
		w.stop = nil
	}
}

// petLogged pets, logging a failure once until a pet works again.
func (w *watchdog) petLogged(log logr.Logger) {
	err := w.pet()
	switch {
	case err != nil && w.petErr == nil:
		log.Error(err, "the watchdog cannot be petted: the node will be reset within its timeout", "timeout", w.timeout.String())
	case err == nil && w.petErr != nil:
		log.Info("petting the watchdog works again", "device", w.path)
	}
	w.petErr = err
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
