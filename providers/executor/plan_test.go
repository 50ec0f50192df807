package executor_test

import (
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/providers/executor"
)

func probeWithGrace(grace *int64) *corev1.Probe {
	return &corev1.Probe{TerminationGracePeriodSeconds: grace}
}

func TestGracePeriodSeconds(t *testing.T) {
	pod := func(deletion, spec *int64, c corev1.Container) *corev1.Pod {
		c.Name = "app"
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", DeletionGracePeriodSeconds: deletion},
			Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: spec, Containers: []corev1.Container{c}},
		}
	}
	live := corev1.Container{LivenessProbe: probeWithGrace(ptr.To[int64](7)), StartupProbe: probeWithGrace(nil)}
	start := corev1.Container{StartupProbe: probeWithGrace(ptr.To[int64](4)), LivenessProbe: probeWithGrace(ptr.To[int64](7))}
	tests := []struct {
		name    string
		req     executor.Request
		want    int64
		wantErr bool
	}{
		{"deletion grace first", executor.Request{Pod: pod(ptr.To[int64](5), ptr.To[int64](30), live)}, 5, false},
		{"deletion grace 0 is 1", executor.Request{Pod: pod(ptr.To[int64](0), ptr.To[int64](30), live)}, 1, false},
		{"spec grace", executor.Request{Pod: pod(nil, ptr.To[int64](10), live)}, 10, false},
		{"default 30", executor.Request{Pod: pod(nil, nil, live)}, 30, false},
		{"spec grace 0 is 1", executor.Request{Pod: pod(nil, ptr.To[int64](0), live)}, 1, false},
		{"probe grace ignored for a pod termination", executor.Request{Pod: pod(nil, ptr.To[int64](30), start)}, 30, false},
		{"liveness probe's grace", executor.Request{Pod: pod(nil, ptr.To[int64](30), live), Reason: executor.ReasonLivenessProbe, Container: "app"}, 7, false},
		{"startup probe's grace", executor.Request{Pod: pod(nil, ptr.To[int64](30), start), Reason: executor.ReasonStartupProbe, Container: "app"}, 4, false},
		{"startup probe without grace: the pod's", executor.Request{Pod: pod(nil, ptr.To[int64](20), live), Reason: executor.ReasonStartupProbe, Container: "app"}, 20, false},
		{"probe without grace, no spec grace: 30", executor.Request{Pod: pod(nil, nil, corev1.Container{}), Reason: executor.ReasonLivenessProbe, Container: "app"}, 30, false},
		{"probe grace longer than the pod's", executor.Request{Pod: pod(nil, ptr.To[int64](3), live), Reason: executor.ReasonLivenessProbe, Container: "app"}, 7, false},
		{"deletion grace beats the probe's", executor.Request{Pod: pod(ptr.To[int64](5), ptr.To[int64](30), live), Reason: executor.ReasonLivenessProbe, Container: "app"}, 5, false},
		{"probe kill of an unknown container", executor.Request{Pod: pod(nil, nil, live), Reason: executor.ReasonLivenessProbe, Container: "x"}, 0, true},
		{"unknown reason", executor.Request{Pod: pod(nil, nil, live), Reason: "Bored"}, 0, true},
		{"no pod", executor.Request{}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := executor.GracePeriodSeconds(tt.req)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("grace = %d, want %d", got, tt.want)
			}
		})
	}
}

// planView is the comparable part of a ContainerPlan.
type planView struct {
	Name       string
	Sidecar    bool
	PreStop    bool
	StopSignal corev1.Signal
	WaitFor    []string
}

func viewPlan(p *executor.Plan) []planView {
	var out []planView
	for _, c := range p.Containers {
		out = append(out, planView{c.Name, c.Sidecar, c.PreStop != nil, c.StopSignal, c.WaitFor})
	}
	return out
}

func TestNewPlan(t *testing.T) {
	always := ptr.To(corev1.ContainerRestartPolicyAlways)
	hook := &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}}
	usr1 := &corev1.Lifecycle{StopSignal: ptr.To(corev1.SIGUSR1)}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "side-1", RestartPolicy: always, Lifecycle: hook},
			{Name: "setup"},
			{Name: "side-2", RestartPolicy: always},
			{Name: "side-3", RestartPolicy: always, Lifecycle: usr1},
		},
		Containers: []corev1.Container{{Name: "a", Lifecycle: usr1}, {Name: "b", Lifecycle: hook}},
	}}
	tests := []struct {
		name string
		req  executor.Request
		want []planView
	}{
		{"sidecars after the mains, in reverse order", executor.Request{Pod: pod}, []planView{
			{Name: "side-1", Sidecar: true, PreStop: true, WaitFor: []string{"a", "b", "side-2"}},
			{Name: "setup"},
			{Name: "side-2", Sidecar: true, WaitFor: []string{"a", "b", "side-3"}},
			{Name: "side-3", Sidecar: true, StopSignal: corev1.SIGUSR1, WaitFor: []string{"a", "b"}},
			{Name: "a", StopSignal: corev1.SIGUSR1},
			{Name: "b", PreStop: true},
		}},
		{"a probe's kill: that container only, no ordering", executor.Request{Pod: pod, Reason: executor.ReasonLivenessProbe, Container: "side-3"},
			[]planView{{Name: "side-3", Sidecar: false, StopSignal: corev1.SIGUSR1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := executor.NewPlan(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, viewPlan(p)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStopSignal(t *testing.T) {
	tests := []struct {
		name       string
		lifecycle  corev1.Signal
		image      string
		want       syscall.Signal
		wantSource executor.SignalSource
		wantErr    bool
	}{
		{"lifecycle first", corev1.SIGUSR1, "SIGUSR2", syscall.SIGUSR1, executor.SignalFromLifecycle, false},
		{"lifecycle real-time", corev1.SIGRTMINPLUS1, "", 35, executor.SignalFromLifecycle, false},
		{"image by name", "", "SIGUSR2", syscall.SIGUSR2, executor.SignalFromImage, false},
		{"image without SIG", "", "QUIT", syscall.SIGQUIT, executor.SignalFromImage, false},
		{"image by number", "", "10", syscall.SIGUSR1, executor.SignalFromImage, false},
		{"default SIGTERM", "", "", syscall.SIGTERM, executor.SignalDefault, false},
		{"bad image signal", "", "SIGNOPE", 0, executor.SignalFromImage, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, src, err := executor.StopSignal(tt.lifecycle, tt.image)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want || src != tt.wantSource {
				t.Errorf("StopSignal = %v from %s, want %v from %s", got, src, tt.want, tt.wantSource)
			}
		})
	}
}

func TestSignalName(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{
		syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", 36: "SIGRTMIN+2",
	} {
		if got := executor.SignalName(sig); got != want {
			t.Errorf("SignalName(%d) = %q, want %q", sig, got, want)
		}
	}
}

// TestParseSignalFound keeps what FuzzParseSignal found: a number outside the signals was taken
// as a stop signal, and the names of the upper real-time signals did not read back.
func TestParseSignalFound(t *testing.T) {
	for _, s := range []string{"-9", "65", "4294967295"} {
		if sig, err := executor.ParseSignal(s); err == nil {
			t.Errorf("ParseSignal(%q) = %d, want an error", s, sig)
		}
	}
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		if back, err := executor.ParseSignal(executor.SignalName(sig)); err != nil || back != sig {
			t.Errorf("SignalName(%d) = %q reads back as %d, %v", sig, executor.SignalName(sig), back, err)
		}
	}
}
