package node

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
			if tc.wantError != nil && res != (result{}) {
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
