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

// watchdogStandIn is a machine's watchdog device, for agents run with --watchdog-device,
// --watchdog-timeout and --watchdog-stand-in (Options.Watchdog). A stand-in, because no real one
// can be had here: a hardware watchdog, or the kernel's softdog, would reset this test host
// itself, not the machine's namespaces. It is a FIFO the agent opens and writes its pets to; it
// follows Linux's watchdog rules as the agent uses them: the first write arms it, every write
// restarts its timer, the magic character 'V' followed by the close disarms it, a close without
// it (the agent died, or left it armed) pings it once more (the kernel's watchdog_release), and
// a timer that runs out resets the machine (machine.Reset: every process dies at once and it
// boots again), unless the machine is off.
type watchdogStandIn struct {
	path    string
	timeout time.Duration
	m       *machine.Machine
	logf    func(string, ...any)

	mu       sync.Mutex
	armed    bool
	deadline time.Time
	stopping bool
	// armedBoot is the machine's boot ID at the last pet: a machine booted since (its power
	// cut and restored by its BMC) has a watchdog that starts disarmed.
	armedBoot string
}

// startWatchdog makes machine node's stand-in in dir; it runs until the test ends.
func startWatchdog(t testing.TB, dir, node string, timeout time.Duration, logf func(string, ...any)) *watchdogStandIn {
	t.Helper()
	w := &watchdogStandIn{path: filepath.Join(dir, "watchdog-"+node), timeout: timeout, logf: logf}
	if err := syscall.Mkfifo(w.path, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(w.read)
	wg.Go(func() { w.watch(stop) })
	t.Cleanup(func() {
		close(stop)
		w.mu.Lock()
		w.stopping = true
		w.mu.Unlock()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		// A reader waiting in open is let go by a writer that opens and closes; one about to
		// open is let go by the next try. One still reading (an agent that outlived its
		// machine's teardown) is left after 30 s.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			if f, err := os.OpenFile(w.path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				_ = f.Close()
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		w.logf("watchdog stand-in %s: its reader did not end within 30 s of the test's end", w.path)
	})
	return w
}

// read takes each agent's writes, from its open (the FIFO's open waits for a writer) to its
// close, until the test ends.
func (w *watchdogStandIn) read() {
	buf := make([]byte, 64)
	for {
		f, err := os.OpenFile(w.path, os.O_RDONLY, 0)
		if err != nil {
			return
		}
		var last byte
		for {
			n, err := f.Read(buf)
			w.mu.Lock()
			for _, b := range buf[:n] {
				if b != 'V' {
					w.armed, w.deadline = true, time.Now().Add(w.timeout)
					if w.m != nil {
						w.armedBoot = w.m.BootID()
					}
				}
				last = b
			}
			w.mu.Unlock()
			if err != nil {
				break // every writer closed it
			}
		}
		_ = f.Close()
		w.mu.Lock()
		switch {
		case last == 'V':
			w.armed = false // the magic close
		case w.armed:
			w.deadline = time.Now().Add(w.timeout) // closed armed: one more ping
		}
		stopping := w.stopping
		w.mu.Unlock()
		if stopping {
			return
		}
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
		if w.armed && w.m != nil && w.armedBoot != "" && w.m.BootID() != w.armedBoot {
			w.armed = false // the machine lost its power since (a watchdog loses its state with it)
		}
		expired := w.armed && time.Now().After(w.deadline) && w.m != nil
		if expired {
			w.armed = false
			expired = w.m.Running() // a machine off (or booting) has no running watchdog
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
