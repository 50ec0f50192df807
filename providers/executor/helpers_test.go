package executor_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/providers/executor"
	"palisade.dev/palisade/test/testbed/containerd"
)

const (
	// plainImage has no STOPSIGNAL; usr2Image has STOPSIGNAL SIGUSR2.
	plainImage = "palisade.test/events:plain"
	usr2Image  = "palisade.test/events:usr2"
	// tolerance is how far a measured time may be from the rule's.
	tolerance = 500 * time.Millisecond
)

// bed is the containerd shared by this package's tests (each test uses its own pods).
var bed struct {
	ctd *containerd.Containerd
	rt  *executor.Containerd
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "palisade-exec-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if bed.ctd, err = containerd.Start(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "starting containerd:", err)
		return 1
	}
	defer bed.ctd.Stop()
	for _, img := range []containerd.Image{
		{Name: plainImage, Cmd: containerd.EventCommand},
		{Name: usr2Image, Cmd: containerd.EventCommand, StopSignal: "SIGUSR2"},
	} {
		if err := bed.ctd.ImportImage(ctx, img); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if bed.rt, err = executor.NewContainerd(ctx, bed.ctd.Socket); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer bed.rt.Close()
	return m.Run()
}

// newPod is a pod whose containers run containerd.EventCommand from plainImage.
func newPod(name string, grace int64, containers ...corev1.Container) *corev1.Pod {
	for i := range containers {
		if containers[i].Image == "" {
			containers[i].Image = plainImage
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(grace), Containers: containers},
	}
}

// ctr is a container that records its events and exits on the signals in exitOn.
func ctr(name, exitOn string) corev1.Container {
	return corev1.Container{Name: name, Env: []corev1.EnvVar{{Name: "EXIT_ON", Value: exitOn}}}
}

func withPreStop(c corev1.Container, d time.Duration) corev1.Container {
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: containerd.PreStopCommand(d)},
	}}
	return c
}

func sidecar(c corev1.Container) corev1.Container {
	c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	return c
}

// runPod runs pod's sidecars, then its containers, and waits until each one ticks; regular
// init containers are left out, as they have long finished in a running pod. It returns the
// directory of their event logs.
func runPod(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := t.TempDir()
	p := containerd.Pod{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID), EventsDir: events}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.RestartPolicy == nil && isInit(pod, c.Name) {
			continue
		}
		if c.Image == "" {
			c.Image = plainImage
		}
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		p.Containers = append(p.Containers, containerd.Container{Name: c.Name, Image: c.Image, Env: env})
	}
	if _, err := bed.ctd.RunPod(ctx, p); err != nil {
		t.Fatalf("running pod %s: %v\n%s", pod.Name, err, bed.ctd.LogTail(20))
	}
	for _, c := range p.Containers {
		containerd.WaitForEvent(t, events, c.Name, "tick")
	}
	return events
}

func terminate(t *testing.T, req executor.Request) *executor.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := executor.New(bed.rt).Terminate(ctx, req)
	if err != nil {
		t.Fatalf("terminating: %v\n%v", err, rep)
	}
	t.Logf("report:\n%s", rep)
	return rep
}

// assertNear checks a duration measured from the container's view against the rule's.
func assertNear(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	t.Logf("MEASURED %s: %.3fs (want %.1fs ±%.1fs)", what, got.Seconds(), want.Seconds(), tolerance.Seconds())
	if got < want-tolerance || got > want+tolerance {
		t.Errorf("%s = %.3fs, want %.1fs ±%.1fs", what, got.Seconds(), want.Seconds(), tolerance.Seconds())
	}
}

func isInit(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

func envVar(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }
