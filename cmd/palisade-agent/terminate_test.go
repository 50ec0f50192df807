package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/test/testbed/containerd"
)

// The kubelet's labels and container annotations (as palisade-executor's restore.go reads
// them), with which the tests make pods as the kubelet would.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"

	annotationTerminationGrace = "io.kubernetes.pod.terminationGracePeriod"
	annotationPreStop          = "io.kubernetes.container.preStopHandler"
)

// eventsImage runs containerd.EventCommand.
const eventsImage = "palisade.test/events:plain"

// tolerance is how far a time measured from a container's own view may be from the rule's.
const tolerance = 500 * time.Millisecond

// startContainerd runs a private containerd for one test, with eventsImage imported.
func startContainerd(t *testing.T) *containerd.Containerd {
	t.Helper()
	ctd := containerd.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ctd.ImportImage(ctx, containerd.Image{Name: eventsImage, Cmd: containerd.EventCommand}); err != nil {
		t.Fatal(err)
	}
	return ctd
}

// runAnnotatedPod runs a one-container pod the way the kubelet creates it, with the
// annotations the kubelet writes on every container (its pod's grace period, its preStop
// hook), which the agent reads back since it has no pod spec. The container ignores TERM.
func runAnnotatedPod(t *testing.T, ctd *containerd.Containerd, name, uid string, annotations map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	labels := map[string]string{labelPodName: name, labelPodNamespace: "default", labelPodUID: uid}
	hostNet := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid},
		LogDirectory: t.TempDir(), Labels: labels,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: hostNet}},
	}
	id, err := ctd.Runtime.RunPodSandbox(ctx, sandbox, "")
	if err != nil {
		t.Fatalf("running sandbox of %s: %v", name, err)
	}
	ctrLabels := map[string]string{labelContainerName: "app"}
	for k, v := range labels {
		ctrLabels[k] = v
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: eventsImage},
		Envs:   []*runtimeapi.KeyValue{{Key: "CONTAINER_NAME", Value: []byte("app")}},
		Labels: ctrLabels, Annotations: annotations, LogPath: "app.log",
		Mounts: []*runtimeapi.Mount{{ContainerPath: "/events", HostPath: dir}},
		Linux:  &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: hostNet}},
	}
	cid, err := ctd.Runtime.CreateContainer(ctx, id, cfg, sandbox)
	if err == nil {
		err = ctd.Runtime.StartContainer(ctx, cid)
	}
	if err != nil {
		t.Fatalf("starting the container of %s: %v", name, err)
	}
	containerd.WaitForEvent(t, dir, "app", "tick")
	return dir
}

func assertNear(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	t.Logf("MEASURED %s: %.3fs (want %.1fs ±%.1fs)", what, got.Seconds(), want.Seconds(), tolerance.Seconds())
	if got < want-tolerance || got > want+tolerance {
		t.Errorf("%s = %.3fs, want %.1fs ±%.1fs", what, got.Seconds(), want.Seconds(), tolerance.Seconds())
	}
}

// containerStates reads the pod's containers back through the CRI: state by container name.
func containerStates(t *testing.T, ctd *containerd.Containerd, uid string) map[string]runtimeapi.ContainerState {
	t.Helper()
	list, err := ctd.Runtime.ListContainers(context.Background(), &runtimeapi.ContainerFilter{LabelSelector: map[string]string{labelPodUID: uid}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]runtimeapi.ContainerState{}
	for _, c := range list {
		out[c.Labels[labelContainerName]] = c.State
	}
	return out
}

func sandboxStates(t *testing.T, ctd *containerd.Containerd, uid string) []runtimeapi.PodSandboxState {
	t.Helper()
	list, err := ctd.Runtime.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodUID: uid}})
	if err != nil {
		t.Fatal(err)
	}
	var out []runtimeapi.PodSandboxState
	for _, sb := range list {
		out = append(out, sb.State)
	}
	return out
}

// waitForOutcome reads heartbeats until one reports command id Confirmed or Failed, and
// returns the states reported for id in order (repeats folded) and the final status.
func waitForOutcome(t *testing.T, e *env, id string, within time.Duration) ([]string, agentwire.ExecutorStatus) {
	t.Helper()
	var states []string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); {
		hb := e.next(t, within)
		st := hb.Executor
		if st == nil || st.ID != id {
			continue
		}
		if len(states) == 0 || states[len(states)-1] != st.State {
			states = append(states, st.State)
		}
		if st.State != agentwire.ExecutorRunning {
			return states, *st
		}
	}
	t.Fatalf("command %s not finished within %s (states %v)", id, within, states)
	return nil, agentwire.ExecutorStatus{}
}

// TestTerminateCommand: the controller orders the agent (the real binary, on a real
// containerd) to terminate its node's workload with a 2 s grace cap. The heartbeats report
// Running, then Confirmed; the kubelet stop command ran first, and the status says so; the
// containers are really gone as read back through the CRI, each stopped by the kubelet's rules
// as the containers saw it; the agent's own pod is left running, and the command is not run
// again.
func TestTerminateCommand(t *testing.T) {
	t.Parallel()
	ctd := startContainerd(t)
	work := ctd.RunEventsPod(t, "work", "uid-work", eventsImage, map[string]string{"graceful": "TERM", "stubborn": ""})
	preStop, _ := json.Marshal(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: containerd.PreStopCommand(30 * time.Second)}})
	annotated := runAnnotatedPod(t, ctd, "annotated", "uid-annotated", map[string]string{
		annotationTerminationGrace: "1", annotationPreStop: string(preStop),
	})
	ctd.RunEventsPod(t, "agent-self", "uid-agent", eventsImage, map[string]string{"agent": ""})

	e := newEnv(t, "127.0.0.1:0")
	k := newKubelet()
	defer k.srv.Close()
	stopped := filepath.Join(t.TempDir(), "kubelet-stopped")
	p := e.startAgent(t, e.server.Addr(), k.srv.URL, interval, "--cri-endpoint", ctd.Socket,
		"--kubelet-stop-command", "touch "+stopped, "--pod-uid", "uid-agent")
	if hb := e.next(t, 5*time.Second); hb.Executor != nil {
		t.Errorf("executor status %+v before any command", hb.Executor)
	}
	e.server.SetCommand(testNode, agentwire.Command{ID: "fence-1", Action: agentwire.ActionTerminate, GracePeriodSeconds: ptr.To[int64](2)})
	start := time.Now()
	states, final := waitForOutcome(t, e, "fence-1", 15*time.Second)
	t.Logf("MEASURED command set to Confirmed: %.3fs (states %v)", time.Since(start).Seconds(), states)
	if strings.Join(states, ",") != "Running,Confirmed" || final.Pods != 2 || final.Containers != 3 || final.Message != "" || !final.KubeletStopped {
		t.Fatalf("states %v, final %+v; want Running then Confirmed for 2 pods, 3 containers, the kubelet stopped", states, final)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("Confirmed %s after the command, want ~3.5 s", took)
	}
	if got, ok := e.server.ExecutorStatus(testNode); !ok || got.State != agentwire.ExecutorConfirmed || got.ID != "fence-1" {
		t.Errorf("server's executor status %+v, %v", got, ok)
	}
	if _, err := os.Stat(stopped); err != nil {
		t.Errorf("the kubelet stop command did not run: %v", err)
	}
	checkGone(t, ctd, work, annotated)
	if got := containerStates(t, ctd, "uid-agent")["agent"]; got != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the agent's own pod: %v, want running", got)
	}
	checkNotRerun(t, e, p, final)
}

// checkGone reads the terminated pods back through the CRI and checks from the containers'
// own event logs that each was stopped by the kubelet's rules.
func checkGone(t *testing.T, ctd *containerd.Containerd, work, annotated string) {
	t.Helper()
	for uid, names := range map[string][]string{"uid-work": {"graceful", "stubborn"}, "uid-annotated": {"app"}} {
		states := containerStates(t, ctd, uid)
		for _, n := range names {
			if states[n] != runtimeapi.ContainerState_CONTAINER_EXITED {
				t.Errorf("pod %s container %s: %v, want exited", uid, n, states[n])
			}
		}
		for _, st := range sandboxStates(t, ctd, uid) {
			if st != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				t.Errorf("pod %s sandbox %v, want not ready", uid, st)
			}
		}
	}
	if evs := containerd.MustReadEvents(t, work, "graceful"); !evs.Has("TERM") || !evs.Has("exit") {
		t.Errorf("graceful container saw %v, want TERM then exit", evs)
	}
	stubborn := containerd.MustReadEvents(t, work, "stubborn")
	assertNear(t, "stubborn: TERM to death (grace capped at 2 s)", stubborn.Last()-containerd.EventAt(t, stubborn, "stubborn", "TERM"), 2*time.Second)
	// Its own grace (1 s, from the kubelet's annotation) is under the cap: the 30 s preStop
	// hook is cut at 1 s, then TERM, then SIGKILL 2 s later (the minimum).
	app := containerd.MustReadEvents(t, annotated, "app")
	hook := containerd.EventAt(t, app, "app", "prestop")
	assertNear(t, "annotated: preStop start to TERM (own grace 1 s)", containerd.EventAt(t, app, "app", "TERM")-hook, time.Second)
	assertNear(t, "annotated: preStop start to death (1 s + 2 s minimum)", app.Last()-hook, 3*time.Second)
}

// checkNotRerun: the command is still pending, but its ID is carried out once only.
func checkNotRerun(t *testing.T, e *env, p *proc, final agentwire.ExecutorStatus) {
	t.Helper()
	for range 3 {
		if st := e.next(t, 5*time.Second).Executor; st == nil || !st.FinishedAt.Equal(final.FinishedAt) || st.State != agentwire.ExecutorConfirmed {
			t.Errorf("later executor status %+v, want the first run's %+v", st, final)
		}
	}
	if n := strings.Count(p.logs(), `"command received"`); n != 1 {
		t.Errorf("%d \"command received\" log lines, want 1", n)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	checkJSONLogs(t, p.logs(), "command received", "kubelet stopped", "terminating pods", "pod terminated", "command confirmed")
}

// TestTerminateCommandNotCarriedOut: a failing kubelet stop command fails the command before
// anything is terminated; so does a runtime that holds no sandbox of the agent's own pod
// (--pod-uid), which is not the kubelet's, before the kubelet stop command runs; an agent with
// the fault injected reports Confirmed while the workload still runs (what the controller's own
// confirmation must catch). An agent without --pod-uid says at start that it cannot check the
// runtime.
func TestTerminateCommandNotCarriedOut(t *testing.T) {
	t.Parallel()
	ctd := startContainerd(t)
	ctd.RunEventsPod(t, "victim", "uid-victim", eventsImage, map[string]string{"app": "TERM"})
	k := newKubelet()
	defer k.srv.Close()
	stopped := filepath.Join(t.TempDir(), "kubelet-stopped")
	for _, tc := range []struct {
		name, state string
		flags       []string
		message     []string
	}{
		{"kubelet stop command fails", agentwire.ExecutorFailed, []string{"--kubelet-stop-command", "echo no kubelet here >&2; exit 3"},
			[]string{"kubelet stop command", "exit status 3", "no kubelet here"}},
		{"runtime is not the kubelet's", agentwire.ExecutorFailed, []string{"--pod-uid", "uid-agent", "--kubelet-stop-command", "touch " + stopped},
			[]string{"the runtime at " + ctd.Socket + " holds no sandbox of this agent's own pod uid-agent, so it is not the kubelet's runtime",
				"set --cri-endpoint (the chart's agent.criEndpoint)"}},
		{"fault injected", agentwire.ExecutorConfirmed, []string{"--fault-report-confirmed-early"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "127.0.0.1:0")
			p := e.startAgent(t, e.server.Addr(), k.srv.URL, interval, append([]string{"--cri-endpoint", ctd.Socket}, tc.flags...)...)
			e.server.SetCommand(testNode, agentwire.Command{ID: "c1", Action: agentwire.ActionTerminate})
			_, final := waitForOutcome(t, e, "c1", 10*time.Second)
			if final.State != tc.state || !containsAll(final.Message, tc.message) || final.KubeletStopped {
				t.Errorf("final status %+v, want %s with a message holding %q, the kubelet not said stopped", final, tc.state, tc.message)
			}
			if got := containerStates(t, ctd, "uid-victim")["app"]; got != runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Errorf("victim container: %v, want still running", got)
			}
			if _, err := os.Stat(stopped); err == nil {
				t.Error("the kubelet stop command ran")
			}
			want := 1
			if slices.Contains(tc.flags, "--pod-uid") {
				want = 0
			}
			if n := strings.Count(p.logs(), "without --pod-uid the runtime at --cri-endpoint cannot be verified as the kubelet's"); n != want {
				t.Errorf("%d log lines saying the runtime cannot be verified, want %d", n, want)
			}
		})
	}
}

// TestTerminateCommandWithoutRuntime: without --cri-endpoint a Terminate command fails with
// "no runtime configured"; an unknown action fails too.
func TestTerminateCommandWithoutRuntime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "127.0.0.1:0")
	k := newKubelet()
	defer k.srv.Close()
	e.startAgent(t, e.server.Addr(), k.srv.URL, interval)
	for _, tc := range []struct{ id, action, message string }{
		{"c1", agentwire.ActionTerminate, "no runtime configured"},
		{"c2", "Reboot", `unknown action "Reboot"`},
	} {
		e.server.SetCommand(testNode, agentwire.Command{ID: tc.id, Action: tc.action})
		_, final := waitForOutcome(t, e, tc.id, 5*time.Second)
		if final.State != agentwire.ExecutorFailed || !strings.Contains(final.Message, tc.message) || final.FinishedAt.IsZero() {
			t.Errorf("final status %+v, want Failed %q", final, tc.message)
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
