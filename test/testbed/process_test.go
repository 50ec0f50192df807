package testbed

import (
	"os"
	"path/filepath"
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
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.status(), "restarted 2 times") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if st := p.status(); !strings.Contains(st, "restarted 2 times (last exit: exit status 3)") {
		t.Fatalf("status %q, want two restarts after exit status 3", st)
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
