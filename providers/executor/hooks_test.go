package executor_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"palisade.dev/palisade/providers/executor"
)

// fakeRuntime holds one running container that exits 0 on its first stop signal or, when
// stubborn, on SIGKILL only. Like a real runtime's, a Signal call on an ended context fails
// and sends nothing; signals records those sent.
type fakeRuntime struct {
	mu       sync.Mutex
	state    executor.ContainerState
	stubborn bool
	signals  []syscall.Signal
	// imageSignal and imageErr are what ImageStopSignal answers.
	imageSignal string
	imageErr    error
}

func (f *fakeRuntime) PodContainers(context.Context, string) ([]executor.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []executor.Container{{ID: "id-app", Name: "app", State: f.state}}, nil
}
func (f *fakeRuntime) ImageStopSignal(context.Context, string) (string, error) {
	return f.imageSignal, f.imageErr
}
func (f *fakeRuntime) Exec(context.Context, string, []string) error          { return nil }
func (f *fakeRuntime) PreventRestart(context.Context, string) (bool, error)  { return false, nil }
func (f *fakeRuntime) StopPodSandboxes(context.Context, string) (int, error) { return 0, nil }
func (f *fakeRuntime) Signal(ctx context.Context, _ string, sig syscall.Signal) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, sig)
	if !f.stubborn || sig == syscall.SIGKILL {
		f.state = executor.StateExited
	}
	return nil
}
func (f *fakeRuntime) Status(context.Context, string) (executor.ContainerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return executor.ContainerStatus{State: f.state, FinishedAt: time.Now()}, nil
}

// TestHTTPAndSleepHooks: httpGet hooks reach the pod's IP on a named port before the stop
// signal; sleep hooks take their time from the grace period.
func TestHTTPAndSleepHooks(t *testing.T) {
	var hits []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits = append(hits, r.URL.Path+" "+r.Header.Get("X-Why"))
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	portNum, _ := strconv.Atoi(port)
	httpHook := &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/quit", Port: intstr.FromString("web"), HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Why", Value: "fence"}},
	}}
	sleepHook := &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}
	for _, tt := range []struct {
		name     string
		hook     *corev1.LifecycleHandler
		wantHits int
		minTook  time.Duration
	}{{"httpGet", httpHook, 1, 0}, {"sleep", sleepHook, 0, time.Second}} {
		t.Run(tt.name, func(t *testing.T) {
			hits = nil
			app := corev1.Container{Name: "app", Lifecycle: &corev1.Lifecycle{PreStop: tt.hook},
				Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: int32(portNum)}}}
			pod := newPod("hooks", 10, app)
			pod.Status.PodIP = host
			rt := &fakeRuntime{state: executor.StateRunning}
			rep, err := executor.New(rt).Terminate(context.Background(), executor.Request{Pod: pod})
			if err != nil {
				t.Fatal(err)
			}
			c := rep.Container("app")
			if c.PreStop == nil || !c.PreStop.Completed || c.PreStop.Error != "" || len(hits) != tt.wantHits {
				t.Errorf("hook = %+v, hits %v", c.PreStop, hits)
			}
			if took := c.SignalledAt.Sub(rep.Started); took < tt.minTook {
				t.Errorf("stop signal after %v, want at least %v", took, tt.minTook)
			}
			if len(rt.signals) != 1 || rt.signals[0] != syscall.SIGTERM || c.Outcome != executor.OutcomeExited {
				t.Errorf("signals %v, outcome %s; want SIGTERM only, exited", rt.signals, c.Outcome)
			}
		})
	}
}
