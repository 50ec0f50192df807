package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/providers/executor"
	"palisade.dev/palisade/providers/executor/protocol"
)

// TestTerminateChecksKubeletRuntime: a runtime without a sandbox of the agent's own pod is not
// the kubelet's, and a terminate there fails, saying what to set, before anything is stopped;
// with the agent's sandbox, or without the agent's pod UID to check by, it terminates as
// before.
func TestTerminateChecksKubeletRuntime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		agentSandbox  bool
		podUID        string
		wantError     []string // parts of the error; nil: none
		wantStopped   []string
		wantWorkState runtimeapi.ContainerState
	}{
		{name: "agent's sandbox in the runtime", agentSandbox: true, podUID: "uid-agent",
			wantStopped: []string{"terminated to app", "sandboxes of u1"}, wantWorkState: runtimeapi.ContainerState_CONTAINER_EXITED},
		{name: "no sandbox of the agent's pod", podUID: "uid-agent", wantError: []string{
			"the runtime at " + fakeEndpoint + " holds no sandbox of this agent's own pod uid-agent, so it is not the kubelet's runtime",
			"set --cri-endpoint (the chart's agent.criEndpoint)",
		}, wantWorkState: runtimeapi.ContainerState_CONTAINER_RUNNING},
		{name: "no --pod-uid to check by", wantStopped: []string{"terminated to app", "sandboxes of u1"},
			wantWorkState: runtimeapi.ContainerState_CONTAINER_EXITED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt := newFakeRuntime()
			rt.add("u1", "web", "app", runtimeapi.ContainerState_CONTAINER_RUNNING)
			if tc.agentSandbox {
				rt.add("uid-agent", "agent", "agent", runtimeapi.ContainerState_CONTAINER_RUNNING)
			}
			res, err := terminateWithFakes(t, rt, tc.podUID, nil)
			if tc.wantError == nil && err != nil || tc.wantError != nil && (err == nil || !containsAll(err.Error(), tc.wantError)) {
				t.Errorf("terminateAll: %v, want an error holding %q", err, tc.wantError)
			}
			if tc.wantError != nil && !cmp.Equal(res, result{}, cmp.AllowUnexported(result{})) {
				t.Errorf("result %+v of a refused terminate, want none", res)
			}
			if diff := cmp.Diff(tc.wantStopped, rt.stopped()); diff != "" {
				t.Errorf("signals and sandbox stops (-want +got):\n%s", diff)
			}
			if got := rt.state("app"); got != tc.wantWorkState {
				t.Errorf("workload container: %v, want %v", got, tc.wantWorkState)
			}
		})
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

// TestGraceCapFitsTimeLimit: each pod's grace period is capped so that SIGKILL and its
// read-back (10 s by default) fit within the order's time limit, 3 s kept for SIGKILL; the
// command's own cap applies when it is the smaller one, and without a time limit alone.
func TestGraceCapFitsTimeLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		left    time.Duration // until the order's time limit; 0: none
		limit   *int64
		want    *int64
		wantCut bool
	}{
		{name: "no time limit, no cap"},
		{name: "no time limit", limit: ptr.To[int64](30), want: ptr.To[int64](30)},
		{name: "2 min order", left: 120*time.Second + 500*time.Millisecond, want: ptr.To[int64](107), wantCut: true},
		{name: "command's cap smaller", left: 120*time.Second + 500*time.Millisecond, limit: ptr.To[int64](30), want: ptr.To[int64](30)},
		{name: "time limit's smaller", left: 120*time.Second + 500*time.Millisecond, limit: ptr.To[int64](300), want: ptr.To[int64](107), wantCut: true},
		{name: "no room left", left: 5 * time.Second, limit: ptr.To[int64](300), want: ptr.To[int64](0), wantCut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tc.left > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.left)
				defer cancel()
			}
			got, cut := graceCap(ctx, executor.New(nil), tc.limit)
			if diff := cmp.Diff(tc.want, got); diff != "" || cut != tc.wantCut {
				t.Errorf("cap (-want +got):\n%s\ncut %v, want %v", diff, cut, tc.wantCut)
			}
		})
	}
}

// TestGraceCutsReported: a terminate reports the pods whose own grace period it cut to fit the
// order's time limit (20 s here: 16 s fit, with a 200 ms read-back), with the grace they had
// and the one they got; a pod whose grace fits is not named.
func TestGraceCutsReported(t *testing.T) {
	t.Parallel()
	rt := newFakeRuntime()
	for uid, grace := range map[string]string{"u1": "300", "u2": "5"} {
		c := fakeContainer("app-"+uid, uid, "app", runtimeapi.ContainerState_CONTAINER_RUNNING, 1,
			map[string]string{annotationTerminationGrace: grace})
		c.Labels[labelPodName] = map[string]string{"u1": "db-0", "u2": "web"}[uid]
		rt.containers[c.Id] = c
		rt.sandboxes[uid] = &runtimeapi.PodSandbox{Id: "sandbox-" + uid, State: runtimeapi.PodSandboxState_SANDBOX_READY,
			Labels: map[string]string{labelPodUID: uid, labelPodName: c.Labels[labelPodName], labelPodNamespace: "default"}}
	}
	res, err := terminateWithSpecs(t, rt, nil, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]protocol.GraceCut{{Pod: "default/db-0", From: 300, To: 16}}, res.cuts); diff != "" {
		t.Errorf("grace cuts (-want +got):\n%s", diff)
	}
}
