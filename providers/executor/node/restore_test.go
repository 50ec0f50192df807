package node

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/providers/executor"
)

// TestRestorePod: the pod is rebuilt from the kubelet's labels and annotations as the kubelet's
// restoreSpecsFromContainerLabels does; the command's cap only ever shortens its grace.
func TestRestorePod(t *testing.T) {
	preStop, _ := json.Marshal(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/quit"}})
	ports, _ := json.Marshal([]corev1.ContainerPort{{Name: "http", ContainerPort: 8080}})
	p := &runtimePod{uid: "u1", name: "web", namespace: "shop", containers: []*runtimeapi.Container{
		fakeContainer("old-web", "u1", "web", runtimeapi.ContainerState_CONTAINER_EXITED, 1,
			map[string]string{annotationTerminationGrace: "600"}),
		fakeContainer("new-web", "u1", "web", runtimeapi.ContainerState_CONTAINER_RUNNING, 2, map[string]string{
			annotationTerminationGrace: "45", annotationPreStop: string(preStop), annotationPorts: string(ports),
		}),
		fakeContainer("log", "u1", "log", runtimeapi.ContainerState_CONTAINER_RUNNING, 2,
			map[string]string{annotationPreStop: "{not json", annotationPorts: "[oops"}),
	}}
	pod := restorePod(p)
	if pod.UID != "u1" || pod.Name != "web" || pod.Namespace != "shop" || pod.DeletionGracePeriodSeconds != nil {
		t.Errorf("metadata %+v", pod.ObjectMeta)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g != 45 {
		t.Errorf("termination grace %v, want 45 (the newest container's)", g)
	}
	want := []corev1.Container{
		{Name: "log"},
		{Name: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/quit"}}}},
	}
	if diff := cmp.Diff(want, pod.Spec.Containers); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	if !needsPodIP(pod) {
		t.Error("an httpGet hook without host needs the pod's IP")
	}
	for _, tc := range []struct {
		own   int64
		limit *int64
		want  int64
	}{{45, nil, 45}, {45, ptr.To[int64](2), 2}, {1, ptr.To[int64](2), 1}, {45, ptr.To[int64](0), 1}} {
		pod := restorePod(p)
		pod.Spec.TerminationGracePeriodSeconds = ptr.To(tc.own)
		capGrace(pod, tc.own, tc.limit)
		if got, _ := executor.GracePeriodSeconds(executor.Request{Pod: pod}); got != tc.want {
			t.Errorf("own %d, cap %v: grace %d, want %d", tc.own, tc.limit, got, tc.want)
		}
	}
	deleting := restorePod(&runtimePod{uid: "u2", containers: []*runtimeapi.Container{fakeContainer("c", "u2", "c",
		runtimeapi.ContainerState_CONTAINER_RUNNING, 1, map[string]string{annotationDeletionGrace: "5", annotationTerminationGrace: "60"})}})
	if got, _ := executor.GracePeriodSeconds(executor.Request{Pod: deleting}); got != 5 {
		t.Errorf("pod being deleted: grace %d, want its deletion grace 5", got)
	}
	bare := restorePod(&runtimePod{uid: "u3", containers: []*runtimeapi.Container{fakeContainer("c", "u3", "c", runtimeapi.ContainerState_CONTAINER_RUNNING, 1, nil)}})
	if got, _ := executor.GracePeriodSeconds(executor.Request{Pod: bare}); got != executor.DefaultGracePeriodSeconds {
		t.Errorf("pod without annotations: grace %d, want the default", got)
	}
}

// TestNotConfirmedFails: a container that never exits, even after SIGKILL, fails the command
// with a message naming it; no count or report makes it Confirmed.
func TestNotConfirmedFails(t *testing.T) {
	t.Parallel()
	rt := newFakeRuntime()
	rt.add("u1", "web", "stuck", runtimeapi.ContainerState_CONTAINER_RUNNING)
	rt.unkillable["stuck"] = true
	rt.add("u1", "web", "fine", runtimeapi.ContainerState_CONTAINER_RUNNING)
	rt.add("uid-agent", "agent", "agent", runtimeapi.ContainerState_CONTAINER_RUNNING)
	_, err := terminateWithFakes(t, rt, "uid-agent", nil)
	if err == nil || !strings.Contains(err.Error(), "stuck") || !strings.Contains(err.Error(), "not exited") || strings.Contains(err.Error(), "fine") {
		t.Errorf("terminateAll: %v, want a failure naming the stuck container only", err)
	}
}

// TestSweepFindsLatecomers: a pod that started after the pods were listed is still running at
// the final sweep: the command fails naming it. The agent's own pod is neither terminated nor
// counted against the confirmation.
func TestSweepFindsLatecomers(t *testing.T) {
	rt := newFakeRuntime()
	rt.add("u1", "web", "app", runtimeapi.ContainerState_CONTAINER_RUNNING)
	rt.add("uid-agent", "agent", "agent", runtimeapi.ContainerState_CONTAINER_RUNNING)
	late := func() { rt.add("u2", "late", "late-app", runtimeapi.ContainerState_CONTAINER_RUNNING) }
	res, err := terminateWithFakes(t, rt, "uid-agent", late)
	if err == nil || !strings.Contains(err.Error(), "late-app") || !strings.Contains(err.Error(), "default/late") {
		t.Errorf("terminateAll: %v, want a failure naming the late pod", err)
	}
	if res.pods != 1 || res.containers != 1 {
		t.Errorf("result %+v, want 1 pod and 1 container", res)
	}
	if rt.state("agent") != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Error("the agent's own container was stopped")
	}
	rt.mu.Lock()
	delete(rt.containers, "late-app")
	rt.mu.Unlock()
	if _, err := terminateWithFakes(t, rt, "uid-agent", nil); err != nil {
		t.Errorf("terminateAll once nothing runs: %v", err)
	}
}

// terminateWithFakes runs terminateAll on rt (with a 0 s grace cap and the agent's pod podUID
// excluded), calling afterList once the pods have been listed.
func terminateWithFakes(t *testing.T, rt *fakeRuntime, podUID string, afterList func()) (result, error) {
	t.Helper()
	ex := executor.New(rt)
	ex.PollInterval, ex.ExitTimeout = 10*time.Millisecond, 200*time.Millisecond
	rt.afterList = afterList
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := terminateAll(ctx, &nodeRuntime{endpoint: fakeEndpoint, exec: ex, cri: fakeCRI{f: rt}}, ptr.To[int64](0), podUID, nil, logr.Discard())
	t.Logf("result %+v, error: %v", res, err)
	return res, err
}

func fakeContainer(id, uid, name string, state runtimeapi.ContainerState, created int64, annotations map[string]string) *runtimeapi.Container {
	pod := map[string]string{"u1": "web", "u2": "late"}[uid]
	if pod == "" {
		pod = uid
	}
	return &runtimeapi.Container{
		Id: id, State: state, CreatedAt: created, Annotations: annotations,
		Labels: map[string]string{labelPodUID: uid, labelPodName: pod, labelPodNamespace: "default", labelContainerName: name},
	}
}

// fakeEndpoint is the --cri-endpoint the fakes stand for.
const fakeEndpoint = "unix:///run/containerd/containerd.sock"

// fakeRuntime is the executor's Runtime over a map of containers (by ID; each container's
// name is its ID) and one sandbox per pod UID, and through fakeCRI the agent's CRI client.
// Signals end a container unless it is unkillable; stops records every signal and sandbox stop.
type fakeRuntime struct {
	mu         sync.Mutex
	containers map[string]*runtimeapi.Container
	sandboxes  map[string]*runtimeapi.PodSandbox // by pod UID
	unkillable map[string]bool
	stops      []string
	afterList  func()
	lists      int
}

// fakeCRI is the agent's CRI client over a fakeRuntime.
type fakeCRI struct {
	internalapi.RuntimeService // the methods not overridden are never called
	f                          *fakeRuntime
}

func (c fakeCRI) ListPodSandbox(_ context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for uid, sb := range c.f.sandboxes {
		if want := filter.GetLabelSelector()[labelPodUID]; want == "" || uid == want {
			out = append(out, proto.Clone(sb).(*runtimeapi.PodSandbox))
		}
	}
	return out, nil
}

func (c fakeCRI) ListContainers(_ context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return c.f.listContainers(filter), nil
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{containers: map[string]*runtimeapi.Container{}, sandboxes: map[string]*runtimeapi.PodSandbox{}, unkillable: map[string]bool{}}
}

// add adds container id to pod (UID uid), and the pod's ready sandbox if it has none.
func (f *fakeRuntime) add(uid, pod, id string, state runtimeapi.ContainerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := fakeContainer(id, uid, id, state, 1, nil)
	c.Labels[labelPodName] = pod
	f.containers[id] = c
	if f.sandboxes[uid] == nil {
		labels := map[string]string{labelPodUID: uid, labelPodName: pod, labelPodNamespace: "default"}
		f.sandboxes[uid] = &runtimeapi.PodSandbox{Id: "sandbox-" + uid, State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: labels}
	}
}

// stopped lists the signals sent and the sandboxes stopped, in order.
func (f *fakeRuntime) stopped() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.stops...)
}

func (f *fakeRuntime) state(id string) runtimeapi.ContainerState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.containers[id].State
}

func (f *fakeRuntime) listContainers(filter *runtimeapi.ContainerFilter) []*runtimeapi.Container {
	f.mu.Lock()
	var out []*runtimeapi.Container
	for _, c := range f.containers {
		if uid := filter.GetLabelSelector()[labelPodUID]; uid == "" || c.Labels[labelPodUID] == uid {
			out = append(out, proto.Clone(c).(*runtimeapi.Container))
		}
	}
	f.lists++
	first := f.lists == 1 && filter == nil
	f.mu.Unlock()
	if first && f.afterList != nil {
		f.afterList()
	}
	return out
}

func (f *fakeRuntime) PodContainers(_ context.Context, podUID string) ([]executor.Container, error) {
	list := f.listContainers(&runtimeapi.ContainerFilter{LabelSelector: map[string]string{labelPodUID: podUID}})
	var out []executor.Container
	for _, c := range list {
		out = append(out, executor.Container{ID: c.Id, Name: c.Labels[labelContainerName], State: fakeState(c.State)})
	}
	return out, nil
}

func (f *fakeRuntime) ImageStopSignal(context.Context, string) (string, error) { return "", nil }
func (f *fakeRuntime) Exec(context.Context, string, []string) error            { return nil }
func (f *fakeRuntime) PreventRestart(context.Context, string) (bool, error)    { return false, nil }

func (f *fakeRuntime) StopPodSandboxes(_ context.Context, podUID string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stops = append(f.stops, "sandboxes of "+podUID)
	return 0, nil
}

func (f *fakeRuntime) Signal(_ context.Context, id string, sig syscall.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stops = append(f.stops, sig.String()+" to "+id)
	if !f.unkillable[id] {
		f.containers[id].State = runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return nil
}

func (f *fakeRuntime) Status(_ context.Context, id string) (executor.ContainerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return executor.ContainerStatus{State: fakeState(f.containers[id].State)}, nil
}

func fakeState(s runtimeapi.ContainerState) executor.ContainerState {
	if s == runtimeapi.ContainerState_CONTAINER_EXITED {
		return executor.StateExited
	}
	return executor.StateRunning
}
