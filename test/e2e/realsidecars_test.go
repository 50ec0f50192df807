package e2e

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/test/realscene"
	"palisade.dev/palisade/test/testbed/machine"
)

// sidecarScript is each container of the sidecar probe pod: it logs, on the host's uptime
// clock, "<its name> <event> <seconds>" for its start, every 100 ms that it is alive, and each
// TERM or USR1; on a signal named in $EXIT_ON it sleeps $EXIT_DELAY seconds, logs its exit and
// exits, other signals it ignores.
const sidecarScript = `up() { cut -d' ' -f1 /proc/uptime; }
ev() { echo "$NAME $1 $(up)" >> /term/events; }
on() { ev "$1"; case " $EXIT_ON " in *" $1 "*) sleep "$EXIT_DELAY"; ev exit; exit 0;; esac; }
trap 'on term' TERM
trap 'on usr1' USR1
ev start
while true; do ev alive; sleep 0.1; done`

// sidecarGrace is the sidecar probe pod's grace period.
const sidecarGrace = 8

// checkSidecarStop compares how the sidecar probe pod was stopped by the executor (have) and
// by the kubelet (want): both stop app first, proxy once app has ended, log once proxy has
// ended, and kill log at the grace period's end (sidecarGrace after app's stop signal), at the
// same offsets within termTolerance. The executor sends app SIGUSR1, as its spec says; the
// kubelet here cannot: Debian's containerd 1.6 takes no stop signal from the kubelet and sends
// the image's (none: SIGTERM), which the test records and does not judge.
func checkSidecarStop(t *testing.T, want, have sidecarStop) {
	t.Helper()
	t.Logf("sidecars, kubelet:  %s\nsidecars, executor: %s", want, have)
	for _, r := range []sidecarStop{want, have} {
		if r.at("proxy", "term") < r.at("app", "exit") || r.at("log", "term") < r.at("proxy", "exit") {
			t.Errorf("%s: the sidecars were signalled before the containers after them ended", r)
		}
	}
	if have.appSignal != "usr1" {
		t.Errorf("the executor sent app %q, want usr1 (its lifecycle.stopSignal)", have.appSignal)
	}
	for _, c := range []struct {
		what      string
		want, got float64
	}{
		{"proxy's signal after app's", want.at("proxy", "term"), have.at("proxy", "term")},
		{"log's signal after app's", want.at("log", "term"), have.at("log", "term")},
		{"log's death (SIGKILL) after app's signal", want.at("log", "alive"), have.at("log", "alive")},
	} {
		if math.Abs(c.got-c.want) > termTolerance.Seconds() {
			t.Errorf("%s: executor %.2fs, kubelet %.2fs (tolerance %s)", c.what, c.got, c.want, termTolerance)
		}
	}
	if d := have.at("log", "alive"); math.Abs(d-sidecarGrace) > termTolerance.Seconds() {
		t.Errorf("executor: log killed %.2fs after app's signal, want the grace period, %ds", d, sidecarGrace)
	}
}

// startSidecarProbe runs the sidecar probe pod on node and returns the file its events go to.
func startSidecarProbe(t *testing.T, s *realscene.Scene, name, node string) string {
	t.Helper()
	dir := filepath.Join(s.Machine(node).Dir(), "disk", name)
	always := ptr.To(corev1.ContainerRestartPolicyAlways)
	ctr := func(name, exitOn, delay string) corev1.Container {
		return corev1.Container{Name: name, Image: realscene.WitnessImage.Name, ImagePullPolicy: corev1.PullNever,
			Command:      []string{"/bin/sh", "-c", sidecarScript},
			Env:          []corev1.EnvVar{{Name: "NAME", Value: name}, {Name: "EXIT_ON", Value: exitOn}, {Name: "EXIT_DELAY", Value: delay}},
			VolumeMounts: []corev1.VolumeMount{{Name: "term", MountPath: "/term"}}}
	}
	log, proxy, app := ctr("log", "", "0"), ctr("proxy", "term", "0"), ctr("app", "term usr1", "1")
	log.RestartPolicy, proxy.RestartPolicy = always, always
	app.Lifecycle = &corev1.Lifecycle{StopSignal: ptr.To(corev1.SIGUSR1)}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](sidecarGrace), OS: &corev1.PodOS{Name: corev1.Linux},
			InitContainers: []corev1.Container{log, proxy}, Containers: []corev1.Container{app},
		},
	}
	return runProbe(t, s, pod, dir, "app alive")
}

// waitSpecKept waits until the file of pod specs of m's agent holds the pod name.
func waitSpecKept(t *testing.T, m *machine.Machine, name string) {
	t.Helper()
	file := filepath.Join(m.Dir(), "disk", "state", "pod-specs.json")
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(file)
		return strings.Contains(string(b), `"name":"`+name+`"`), nil
	})
	if err != nil {
		t.Fatalf("the agent's %s does not hold pod %s", file, name)
	}
}

// sidecarStop is what the sidecar probe's containers logged of their stop: by "<name>
// <event>", the last time, in seconds of host uptime after app's stop signal (an "alive": the
// last sign of life); appSignal is the signal app got first.
type sidecarStop struct {
	events    map[string]float64
	appSignal string
}

func (r sidecarStop) at(container, event string) float64 { return r.events[container+" "+event] }

func (r sidecarStop) String() string {
	return "app " + r.appSignal + " +0.00s, app exit +" + strconv.FormatFloat(r.at("app", "exit"), 'f', 2, 64) +
		"s, proxy TERM +" + strconv.FormatFloat(r.at("proxy", "term"), 'f', 2, 64) +
		"s, proxy exit +" + strconv.FormatFloat(r.at("proxy", "exit"), 'f', 2, 64) +
		"s, log TERM +" + strconv.FormatFloat(r.at("log", "term"), 'f', 2, 64) +
		"s, log last alive (SIGKILL) +" + strconv.FormatFloat(r.at("log", "alive"), 'f', 2, 64) + "s"
}

// readSidecarStop reads a sidecar probe's events.
func readSidecarStop(t *testing.T, path string) sidecarStop {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := sidecarStop{events: map[string]float64{}}
	var signalled float64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		v, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			continue
		}
		if f[0] == "app" && (f[1] == "term" || f[1] == "usr1") && r.appSignal == "" {
			r.appSignal, signalled = f[1], v
		}
		r.events[f[0]+" "+f[1]] = v
	}
	for _, need := range []string{"app exit", "proxy term", "proxy exit", "log term"} {
		if _, ok := r.events[need]; !ok || r.appSignal == "" {
			t.Fatalf("sidecar probe %s logged no %q or no signal to app:\n%s", path, need, b)
		}
	}
	for k, v := range r.events {
		r.events[k] = v - signalled
	}
	return r
}
