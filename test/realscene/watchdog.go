package realscene

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"palisade.dev/palisade/test/testbed/machine"
)

// watchdogStandIn is a machine's watchdog device, for agents run with --watchdog-device and
// --watchdog-timeout (Options.Watchdog). A stand-in, because no real one can be had here: a
// hardware watchdog, or the kernel's softdog, would reset this test host itself, not the
// machine's namespaces. It is a FIFO the agent opens and writes its pets to; it follows Linux's
// watchdog rules as the agent uses them: the first write arms it, every write restarts its
// timer, the magic character 'V' disarms it (the agent writes it only to close the device at a
// graceful exit), and a timer that runs out resets the machine (machine.Reset: every process
// dies at once and it boots again), unless the machine is off. The FIFO is also opened for
// writing by the stand-in, so that its reads never end when an agent dies or closes it.
type watchdogStandIn struct {
	path    string
	timeout time.Duration
	m       *machine.Machine
	logf    func(string, ...any)

	mu       sync.Mutex
	armed    bool
	deadline time.Time
	resets   int
}

// startWatchdog makes machine node's stand-in in dir; it runs until the test ends.
func startWatchdog(t testing.TB, dir, node string, timeout time.Duration, logf func(string, ...any)) *watchdogStandIn {
	t.Helper()
	w := &watchdogStandIn{path: filepath.Join(dir, "watchdog-"+node), timeout: timeout, logf: logf}
	if err := syscall.Mkfifo(w.path, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(w.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { w.read(f) })
	wg.Go(func() { w.watch(stop) })
	t.Cleanup(func() { close(stop); _ = f.Close(); wg.Wait() })
	return w
}

// read takes the agents' writes until the FIFO is closed.
func (w *watchdogStandIn) read(f *os.File) {
	buf := make([]byte, 64)
	for {
		n, err := f.Read(buf)
		if err != nil {
			return
		}
		w.mu.Lock()
		for _, b := range buf[:n] {
			if b == 'V' {
				w.armed = false
				continue
			}
			w.armed, w.deadline = true, time.Now().Add(w.timeout)
		}
		w.mu.Unlock()
	}
}

// watch resets the machine when an armed timer runs out.
func (w *watchdogStandIn) watch(stop <-chan struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		w.mu.Lock()
		expired := w.armed && time.Now().After(w.deadline) && w.m != nil
		if expired {
			w.armed = false
			w.resets++
		}
		w.mu.Unlock()
		if expired {
			w.logf("watchdog of %s: not petted for %s: resetting the machine", w.m.Name(), w.timeout)
			if err := w.m.Reset(); err != nil {
				w.logf("watchdog of %s: %v", w.m.Name(), err)
			}
		}
	}
}

// Resets is how many times the watchdog reset its machine.
func (w *watchdogStandIn) Resets() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resets
}
