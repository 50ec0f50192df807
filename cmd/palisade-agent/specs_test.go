package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/test/agentapi"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/containerd"
)

// specsFile is the agent's file of pod specs in its state directory (podspecs.File), read here
// as JSON of v1.Pod's names, as the executor reads it.
const specsFile = "pod-specs.json"

// sidecarPod is pod web bound to testNode: the sidecars log then proxy, and app, whose stop
// signal is SIGUSR1; grace 30 s.
func sidecarPod() *corev1.Pod {
	always := ptr.To(corev1.ContainerRestartPolicyAlways)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.PodSpec{NodeName: testNode, TerminationGracePeriodSeconds: ptr.To[int64](30), OS: &corev1.PodOS{Name: corev1.Linux},
			InitContainers: []corev1.Container{{Name: "log", Image: eventsImage, RestartPolicy: always}, {Name: "proxy", Image: eventsImage, RestartPolicy: always}},
			Containers:     []corev1.Container{{Name: "app", Image: eventsImage, Lifecycle: &corev1.Lifecycle{StopSignal: ptr.To(corev1.SIGUSR1)}}},
		},
	}
}

// runSidecarPod runs pod web's containers on ctd as the kubelet would have created them before
// the pod's deletion: its labels, with uid, and the grace period (30 s) in their annotations.
// log ignores TERM, proxy exits on TERM, app exits 1 s after USR1.
func runSidecarPod(t *testing.T, ctd *containerd.Containerd, uid string) string {
	t.Helper()
	events := t.TempDir()
	a := map[string]string{annotationTerminationGrace: "30"}
	ctr := func(name, exitOn, delay string) containerd.Container {
		return containerd.Container{Name: name, Image: eventsImage, Annotations: a, Env: map[string]string{"EXIT_ON": exitOn, "EXIT_DELAY": delay}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ctd.RunPod(ctx, containerd.Pod{Name: "web", Namespace: "default", UID: uid, EventsDir: events,
		Containers: []containerd.Container{ctr("log", "", "0"), ctr("proxy", "TERM", "0"), ctr("app", "USR1", "1")}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"log", "proxy", "app"} {
		containerd.WaitForEvent(t, events, name, "tick")
	}
	return events
}

// waitSpecsFile waits until the agent's file of pod specs in dir holds pod web as ok says,
// and says whether it did.
func waitSpecsFile(t *testing.T, dir, what string, ok func(corev1.Pod) bool) bool {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		raw, err := os.ReadFile(filepath.Join(dir, specsFile))
		var s struct{ Pods []corev1.Pod }
		if err != nil || json.Unmarshal(raw, &s) != nil {
			return false, nil
		}
		for _, p := range s.Pods {
			if p.Name == "web" && ok(p) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("the agent's %s never held %s", specsFile, what)
	}
	return err == nil
}

// TestTerminateWithKeptSpecs: the real agent, given the API server as the chart gives it,
// keeps the spec of pod web (two sidecars, app's lifecycle.stopSignal) in its state directory
// and takes its graceful deletion (3 s) as it happens. Restarted while the API server is down
// (the self-fence path), it still has them: ordered to terminate, its executor stops web on
// the real containerd as the kubelet would with the spec: app with SIGUSR1 (not the TERM its
// image implies), then proxy once app ended, then log once proxy ended, killed by the kubelet's
// rule for a sidecar: the deletion's grace (3 s) less the whole seconds of its wait for its
// turn, from its own TERM, 2 s at least (sidecarKillDue); not 10 s (the order's cap; the
// containers say 30 s).
func TestTerminateWithKeptSpecs(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, CRDDirs: []string{}, Controllers: []string{"serviceaccount-token-controller"},
		FeatureGates: "ContainerStopSignals=true"})
	ctx := context.Background()
	if _, err := c.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api, err := agentapi.Args(ctx, c.Kube, c.Config.CAData, t.TempDir(), c.Config.Host, "")
	if err != nil {
		t.Fatal(err)
	}
	pod, err := c.Kube.CoreV1().Pods("default").Create(ctx, sidecarPod(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctd := startContainerd(t)
	events := runSidecarPod(t, ctd, string(pod.UID))
	ctd.RunEventsPod(t, "agent-self", "uid-agent", eventsImage, map[string]string{"agent": ""})

	e := newEnv(t, "127.0.0.1:0")
	k := newKubelet()
	defer k.srv.Close()
	state := t.TempDir()
	args := append([]string{"--cri-endpoint", ctd.Socket, "--pod-uid", "uid-agent", "--state-dir", state}, api...)
	p := e.startAgent(t, e.server.Addr(), k.srv.URL, interval, args...)
	waitSpecsFile(t, state, "pod web's sidecars and stop signal", func(p corev1.Pod) bool {
		return len(p.Spec.InitContainers) == 2 && p.Spec.Containers[0].Lifecycle != nil && p.Spec.Containers[0].Lifecycle.StopSignal != nil
	})
	if err := c.Kube.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](3)}); err != nil {
		t.Fatal(err)
	}
	waitSpecsFile(t, state, "pod web's deletion grace of 3 s", func(p corev1.Pod) bool {
		return p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 3
	})
	if code := p.stop(t); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	if err := c.StopAPIServer(ctx); err != nil {
		t.Fatal(err)
	}

	p = e.startAgent(t, e.server.Addr(), k.srv.URL, interval, args...)
	e.server.SetCommand(testNode, agentwire.Command{ID: "fence-1", Action: agentwire.ActionTerminate, GracePeriodSeconds: ptr.To[int64](10)})
	start := time.Now()
	_, final := waitForOutcome(t, e, "fence-1", 30*time.Second)
	t.Logf("MEASURED command set to Confirmed: %.3fs (final %+v)", time.Since(start).Seconds(), final)
	if final.State != agentwire.ExecutorConfirmed || final.Pods != 1 || final.Containers != 3 {
		t.Errorf("final status %+v, want Confirmed for 1 pod, 3 containers", final)
	}
	checkStoppedWithSpec(t, events)
	for _, want := range []string{`"msg":"pod specs kept on disk loaded"`, `"spec":"kept at `} {
		if !strings.Contains(p.logs(), want) {
			t.Errorf("no log line holds %s", want)
		}
	}
}

// checkStoppedWithSpec checks, from pod web's containers' own view, that they were stopped
// by the kubelet's rules with web's spec and its deletion's grace period of 3 s.
func checkStoppedWithSpec(t *testing.T, events string) {
	t.Helper()
	app := containerd.MustReadEvents(t, events, "app")
	proxy := containerd.MustReadEvents(t, events, "proxy")
	log := containerd.MustReadEvents(t, events, "log")
	t.Logf("app %s\nproxy %s\nlog %s", app, proxy, log)
	if app.Has("TERM") || !app.Has("USR1") {
		t.Fatalf("app saw %s, want its stop signal USR1, not TERM", app)
	}
	usr1 := containerd.EventAt(t, app, "app", "USR1")
	proxyTerm, logTerm := containerd.EventAt(t, proxy, "proxy", "TERM"), containerd.EventAt(t, log, "log", "TERM")
	if proxyTerm < app.Last() || logTerm < proxy.Last() {
		t.Errorf("sidecars signalled at +%.3fs (proxy) and +%.3fs (log) after app's USR1; want proxy after app ended (+%.3fs), log after proxy ended (+%.3fs)",
			(proxyTerm - usr1).Seconds(), (logTerm - usr1).Seconds(), (app.Last() - usr1).Seconds(), (proxy.Last() - usr1).Seconds())
	}
	// log ignores TERM, so it dies when its kill is due, by the kubelet's rule for a sidecar:
	// the grace (3 s) less the whole seconds it waited for its turn, from its own stop signal,
	// and never less than 2 s after it.
	want := sidecarKillDue(3*time.Second, logTerm-usr1)
	assertNear(t, fmt.Sprintf("app's USR1 to log's death (deletion grace 3 s, log's TERM at +%.3fs)", (logTerm-usr1).Seconds()), log.Last()-usr1, want)
}

// sidecarKillDue is when, after the pod's first stop signal, a sidecar that ignores its own
// (sent turn after that first one) is killed, by the kubelet's killContainer: the grace less the
// whole seconds of its wait for its turn, from its stop signal, and 2 s at least
// (executor.Deadline.KillAt).
func sidecarKillDue(grace, turn time.Duration) time.Duration {
	return turn + max(grace-turn.Truncate(time.Second), 2*time.Second)
}
