package containerd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"palisade.dev/palisade/test/testbed/containerd"
)

// TestRunPodRecordsEvents runs a pod through the CRI and checks that its container records
// its start, its heartbeat and a signal sent by the CRI's StopContainer (the image's
// STOPSIGNAL, as containerd 1.6 recorded it), and that Stop leaves nothing behind.
func TestRunPodRecordsEvents(t *testing.T) {
	ctd := containerd.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img := containerd.Image{Name: "palisade.test/events:usr2", Cmd: containerd.EventCommand, StopSignal: "SIGUSR2"}
	if err := ctd.ImportImage(ctx, img); err != nil {
		t.Fatal(err)
	}
	events := t.TempDir()
	pod, err := ctd.RunPod(ctx, containerd.Pod{
		Name: "p", Namespace: "default", UID: "uid-1", EventsDir: events,
		Containers: []containerd.Container{{Name: "app", Image: img.Name, Env: map[string]string{"EXIT_ON": "USR2"}}},
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, ctd.LogTail(30))
	}
	containerd.WaitForEvent(t, events, "app", "tick")
	id := pod.ContainerIDs["app"]
	if err := ctd.Runtime.StopContainer(ctx, id, 5); err != nil {
		t.Fatal(err)
	}
	st, err := ctd.Runtime.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetState(); got != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("state = %v, want exited", got)
	}
	if got := st.GetStatus().GetExitCode(); got != 0 {
		t.Errorf("exit code = %d, want 0 (exited on its own after USR2)", got)
	}
	evs, err := containerd.ReadEvents(events, "app")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"start", "tick", "USR2", "exit"} {
		if !evs.Has(name) {
			t.Errorf("event %q missing: %v", name, evs)
		}
	}
	dir := ctd.Dir
	if err := ctd.Stop(); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, dir)
}

// assertNothingLeft checks that no mount and no process refers to dir any more.
func assertNothingLeft(t *testing.T, dir string) {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), dir) {
		t.Errorf("mounts under %s left after Stop", dir)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if cmdline, err := os.ReadFile(p); err == nil && strings.Contains(string(cmdline), dir) {
			t.Errorf("process %s still uses %s after Stop: %q", p, dir, cmdline)
		}
	}
}
