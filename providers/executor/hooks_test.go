package executor_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"palisade.dev/palisade/providers/executor"
)

// fakeRuntime holds one running container that exits 0 on its first stop signal or, when
// stubborn, on SIGKILL only (exit code 137). Like a real runtime's, a Signal call on an ended context fails
// and sends nothing; signals records those sent.
type fakeRuntime struct {
	mu       sync.Mutex
	state    executor.ContainerState
	stubborn bool
	signals  []syscall.Signal
	// failSignals is how many Signal calls fail, sending nothing, before one is sent;
	// failKills the same for SIGKILL alone.
	failSignals, failKills int
	// exitCode is the exit code read back: 137 once SIGKILL ended the container.
	exitCode int32
	// imageSignal and imageErr are what ImageStopSignal answers, after failImage reads
	// that fail; imageReads counts the reads.
	imageSignal           string
	imageErr              error
	failImage, imageReads int
}

func (f *fakeRuntime) PodContainers(context.Context, string) ([]executor.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []executor.Container{{ID: "id-app", Name: "app", State: f.state}}, nil
}
func (f *fakeRuntime) ImageStopSignal(context.Context, string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.imageReads++
	if f.failImage > 0 {
		f.failImage--
		return "", errors.New("runtime busy")
	}
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
	if f.failSignals > 0 {
		f.failSignals--
		return errors.New("runtime busy")
	}
	if sig == syscall.SIGKILL && f.failKills > 0 {
		f.failKills--
		return errors.New("runtime busy")
	}
	f.signals = append(f.signals, sig)
	if !f.stubborn || sig == syscall.SIGKILL {
		f.state = executor.StateExited
		if sig == syscall.SIGKILL {
			f.exitCode = 128 + int32(syscall.SIGKILL)
		}
	}
	return nil
}
func (f *fakeRuntime) Status(context.Context, string) (executor.ContainerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return executor.ContainerStatus{State: f.state, ExitCode: f.exitCode, FinishedAt: time.Now()}, nil
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

// request is what a test server saw of one request.
type request struct{ path, query, host string }

// recorder is a test server that records the requests it gets and answers each with handle,
// when set.
type recorder struct {
	*httptest.Server
	mu     sync.Mutex
	got    []request
	handle http.HandlerFunc
}

func newRecorder(t *testing.T, handle http.HandlerFunc) *recorder {
	rec := &recorder{handle: handle}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.got = append(rec.got, request{r.URL.Path, r.URL.RawQuery, r.Host})
		rec.mu.Unlock()
		if rec.handle != nil {
			rec.handle(w, r)
		}
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) requests() []request {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]request(nil), rec.got...)
}

// TestHTTPHookRequestAsTheKubelet: an httpGet hook's request is built as the kubelet builds it
// (pkg/probe/http NewRequestForHTTPGetAction): a query in the path stays a query, a Host header
// is the request's Host, and a redirect is followed only to the same host name
// (RedirectChecker(false)), the redirect's own response counting as the hook's otherwise.
func TestHTTPHookRequestAsTheKubelet(t *testing.T) {
	elsewhere := newRecorder(t, nil)
	_, elsewherePort, _ := net.SplitHostPort(elsewhere.Listener.Addr().String())
	redirectTo := func(host string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://"+net.JoinHostPort(host, elsewherePort)+"/moved", http.StatusFound)
		}
	}
	for _, tt := range []struct {
		name          string
		path          string
		headers       []corev1.HTTPHeader
		handle        http.HandlerFunc
		want          []request // at the hook's server
		wantElsewhere []request
	}{{
		name: "query and Host", path: "/shutdown?mode=fast", headers: []corev1.HTTPHeader{{Name: "Host", Value: "db.example"}},
		want: []request{{"/shutdown", "mode=fast", "db.example"}},
	}, {
		name: "redirect to another host is not followed", path: "/quit", handle: redirectTo("localhost"),
		want: []request{{"/quit", "", ""}},
	}, {
		name: "redirect to the same host is followed", path: "/quit", handle: redirectTo("127.0.0.1"),
		want: []request{{"/quit", "", ""}}, wantElsewhere: []request{{"/moved", "", "127.0.0.1:" + elsewherePort}},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			elsewhere.mu.Lock()
			elsewhere.got = nil
			elsewhere.mu.Unlock()
			srv := newRecorder(t, tt.handle)
			host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
			for i := range tt.want {
				if tt.want[i].host == "" {
					tt.want[i].host = net.JoinHostPort(host, port)
				}
			}
			hook := &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: tt.path, Port: intstr.Parse(port), HTTPHeaders: tt.headers,
			}}
			pod := newPod("hook-request", 10, corev1.Container{Name: "app", Lifecycle: &corev1.Lifecycle{PreStop: hook}})
			pod.Status.PodIP = host
			rep, err := executor.New(&fakeRuntime{state: executor.StateRunning}).Terminate(context.Background(), executor.Request{Pod: pod})
			if err != nil {
				t.Fatal(err)
			}
			if h := rep.Container("app").PreStop; h == nil || !h.Completed || h.Error != "" {
				t.Errorf("hook = %+v, want completed without error", h)
			}
			if diff := cmp.Diff(tt.want, srv.requests(), cmp.AllowUnexported(request{})); diff != "" {
				t.Errorf("requests at the hook's server (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantElsewhere, elsewhere.requests(), cmp.AllowUnexported(request{})); diff != "" {
				t.Errorf("requests at the redirect's target (-want +got):\n%s", diff)
			}
		})
	}
}
