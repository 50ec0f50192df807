package containerd

import (
	"context"
	"testing"
	"time"
)

// WaitForEvent waits up to 15 s until container (of a pod run with EventsDir dir) has recorded
// the event name, and fails t otherwise.
func WaitForEvent(t testing.TB, dir, container, name string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if evs, err := ReadEvents(dir, container); err == nil && evs.Has(name) {
			return
		}
	}
	t.Fatalf("container %s never recorded %q", container, name)
}

// RunEventsPod runs a pod of image's EventScript containers, one per entry of exitOn (its name
// → the signals it exits on, "" for none), waits until each one ticks, and returns the pod's
// events directory.
func (c *Containerd) RunEventsPod(t testing.TB, name, uid, image string, exitOn map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	p := Pod{Name: name, Namespace: "default", UID: uid, EventsDir: dir}
	for ctr, on := range exitOn {
		p.Containers = append(p.Containers, Container{Name: ctr, Image: image, Env: map[string]string{"EXIT_ON": on}})
	}
	if _, err := c.RunPod(ctx, p); err != nil {
		t.Fatalf("running pod %s: %v\n%s", name, err, c.LogTail(20))
	}
	for ctr := range exitOn {
		WaitForEvent(t, dir, ctr, "tick")
	}
	return dir
}

// MustReadEvents is ReadEvents that fails t on error.
func MustReadEvents(t testing.TB, dir, container string) Events {
	t.Helper()
	evs, err := ReadEvents(dir, container)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// EventAt returns when container recorded the event name (its first), and fails t when it
// never did, with what it did record.
func EventAt(t testing.TB, evs Events, container, name string) time.Duration {
	t.Helper()
	d, ok := evs.First(name)
	if !ok {
		t.Fatalf("container %s never recorded %q: %s", container, name, evs)
	}
	return d
}
