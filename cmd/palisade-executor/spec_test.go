package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"palisade.dev/palisade/providers/executor/protocol"
	"palisade.dev/palisade/test/testbed/containerd"
)

// tolerance is how far a time measured from a container's own view may be from the rule's.
const tolerance = 500 * time.Millisecond

// TestTerminateWithKeptSpec: the agent hands the executor the spec it kept of pod web, whose
// containers the kubelet created on a real containerd before the pod's deletion with a grace
// period of 3 s (their annotation says 30 s). The executor stops web as the kubelet would with
// its spec: app first, with its lifecycle.stopSignal SIGUSR1 (its image has no STOPSIGNAL; it
// exits 1 s after USR1); then the sidecars in the reverse order of their declaration, each once
// the one before has ended: proxy (exits on TERM), then log (ignores TERM), killed by the
// kubelet's rule for a sidecar (the 3 s grace less the whole seconds of its wait for its turn,
// from its own TERM, 2 s at least), not 30 s later. The log says the spec was kept, and when.
func TestTerminateWithKeptSpec(t *testing.T) {
	t.Parallel()
	ctd := startContainerd(t)
	events := t.TempDir()
	annotations := map[string]string{"io.kubernetes.pod.terminationGracePeriod": "30"}
	ctr := func(name, exitOn string, env ...string) containerd.Container {
		c := containerd.Container{Name: name, Image: eventsImage, Annotations: annotations, Env: map[string]string{"EXIT_ON": exitOn}}
		for i := 0; i+1 < len(env); i += 2 {
			c.Env[env[i]] = env[i+1]
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ctd.RunPod(ctx, containerd.Pod{Name: "web", Namespace: "default", UID: "uid-web", EventsDir: events,
		Containers: []containerd.Container{ctr("log", ""), ctr("proxy", "TERM"), ctr("app", "USR1", "EXIT_DELAY", "1")}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"log", "proxy", "app"} {
		containerd.WaitForEvent(t, events, name, "tick")
	}
	spec := protocol.Pod{
		Metadata: protocol.PodMetadata{Namespace: "default", Name: "web", UID: "uid-web", DeletionGracePeriodSeconds: ptr.To[int64](3)},
		Spec: protocol.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			InitContainers:                []protocol.Container{{Name: "log", RestartPolicy: "Always"}, {Name: "proxy", RestartPolicy: "Always"}},
			Containers:                    []protocol.Container{{Name: "app", Lifecycle: &protocol.Lifecycle{StopSignal: "SIGUSR1"}}},
		},
		KeptAt: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC),
	}
	c := startExecutor(t, "--cri-endpoint", ctd.Socket)
	start := time.Now()
	c.send(t, protocol.Request{ID: 1, Op: protocol.OpTerminate, Deadline: start.Add(time.Minute), Command: "fence-1",
		GracePeriodSeconds: ptr.To[int64](10), Pods: []protocol.Pod{spec}})
	resp := c.next(t, 30*time.Second)
	t.Logf("MEASURED terminate answered after %.3fs: %+v", time.Since(start).Seconds(), resp)
	if resp.Error != "" || resp.Pods != 1 || resp.Containers != 3 {
		t.Errorf("terminate: %+v, want 1 pod, 3 containers, no error", resp)
	}
	app := containerd.MustReadEvents(t, events, "app")
	proxy := containerd.MustReadEvents(t, events, "proxy")
	log := containerd.MustReadEvents(t, events, "log")
	t.Logf("app %s\nproxy %s\nlog %s", app, proxy, log)
	if app.Has("TERM") || !app.Has("USR1") || !app.Has("exit") {
		t.Fatalf("app saw %s, want its stop signal USR1 (not TERM), then its exit", app)
	}
	usr1 := containerd.EventAt(t, app, "app", "USR1")
	proxyTerm := containerd.EventAt(t, proxy, "proxy", "TERM")
	logTerm := containerd.EventAt(t, log, "log", "TERM")
	if proxyTerm < app.Last() || logTerm < proxy.Last() {
		t.Errorf("sidecars signalled at +%.3fs (proxy) and +%.3fs (log), want proxy after app ended (+%.3fs) and log after proxy ended (+%.3fs)",
			(proxyTerm - usr1).Seconds(), (logTerm - usr1).Seconds(), (app.Last() - usr1).Seconds(), (proxy.Last() - usr1).Seconds())
	}
	// log ignores TERM, so it dies when its kill is due, by the kubelet's rule for a sidecar:
	// the deletion's grace (3 s) less the whole seconds it waited for its turn, from its own
	// stop signal, and never less than 2 s after it (executor.Deadline.KillAt).
	turn := logTerm - usr1
	want := turn + max(3*time.Second-turn.Truncate(time.Second), 2*time.Second)
	if got := log.Last() - usr1; got < want-tolerance || got > want+tolerance {
		t.Errorf("log died %.3fs after app's USR1, want %.3fs (the deletion's grace period kept; log's TERM at +%.3fs)", got.Seconds(), want.Seconds(), turn.Seconds())
	} else {
		t.Logf("MEASURED app USR1 to log's death: %.3fs (want %.3fs)", got.Seconds(), want.Seconds())
	}
	line := `"spec":"kept at 2026-11-23T10:00:00Z"`
	for end := time.Now().Add(2 * time.Second); !strings.Contains(c.logs(), line); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) { // the log line may come through stderr after the answer
			t.Errorf("no log line says %s", line)
			break
		}
	}
}
