package testbed

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestSupervisedComponentRestarts: a supervised component that exits is started again, as the
// kubelet restarts a static pod, says so in its log and status, and is not started again once
// stopped; an unsupervised one stays down.
func TestSupervisedComponentRestarts(t *testing.T) {
	dir := t.TempDir()
	script := []string{"-c", "echo started; sleep 0.2; exit 3"}
	p, err := superviseComponent("crasher", "/bin/sh", script, filepath.Join(dir, "crasher.log"))
	if err != nil {
		t.Fatal(err)
	}
	// The count of restarts rises just before the process is started again, and the shell
	// writes its line a moment later: wait for the third start in the log as well, or the stop
	// below comes between the two and no third copy ever starts.
	starts := func() int {
		raw, _ := os.ReadFile(filepath.Join(dir, "crasher.log"))
		return strings.Count(string(raw), "started\n")
	}
	restarts := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.restarts
	}
	deadline := time.Now().Add(10 * time.Second)
	for (restarts() < 2 || starts() < 3) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if st := p.status(); !regexp.MustCompile(`restarted ([2-9]|\d\d+) times \(last exit: exit status 3\)`).MatchString(st) {
		t.Fatalf("status %q, want at least two restarts after exit status 3", st)
	}
	if err := p.stop(time.Second); err != nil {
		t.Fatal(err)
	}
	after := p.status()
	time.Sleep(2 * restartDelay)
	if st := p.status(); st != after || strings.Contains(st, "running") {
		t.Errorf("status %q after the stop, then %q: want it down and not started again", after, st)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "crasher.log"))
	if err != nil || strings.Count(string(raw), "started\n") < 3 || !strings.Contains(string(raw), "started again, as the kubelet restarts a static pod") {
		t.Errorf("log %q (%v): want three starts and the restarts said", raw, err)
	}

	once, err := startComponent("once", "/bin/sh", script, filepath.Join(dir, "once.log"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300*time.Millisecond + 2*restartDelay)
	if st := once.status(); st != "exited (exit status 3)" {
		t.Errorf("unsupervised status %q, want it exited and not restarted", st)
	}
	_ = once.stop(time.Second)
}
