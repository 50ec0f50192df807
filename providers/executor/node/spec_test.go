package node

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/providers/executor"
	"palisade.dev/palisade/providers/executor/protocol"
)

// webRuntime is pod u1 ("web") as the runtime holds it: its regular init container ended, two
// sidecars, its main container, and a container its spec does not name; each created with the
// kubelet's annotations of a 30 s grace period and, when deletionGrace is not empty, of a
// deletion's grace period.
func webRuntime(deletionGrace string) *runtimePod {
	a := map[string]string{annotationTerminationGrace: "30"}
	if deletionGrace != "" {
		a[annotationDeletionGrace] = deletionGrace
	}
	running, exited := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED
	return &runtimePod{uid: "u1", name: "web", namespace: "default", containers: []*runtimeapi.Container{
		fakeContainer("setup", "u1", "setup", exited, 1, a),
		fakeContainer("log", "u1", "log", running, 2, a),
		fakeContainer("proxy", "u1", "proxy", running, 3, a),
		fakeContainer("app", "u1", "app", running, 4, a),
		fakeContainer("debug", "u1", "debug", running, 5, a),
	}}
}

// webSpec is what the agent kept of pod u1: sidecars log then proxy, app's stop signal SIGUSR1
// and preStop hook, a container "gone" the runtime does not hold, and a deletion's grace
// period of deletionGrace seconds (nil: not being deleted).
func webSpec(deletionGrace *int64) protocol.Pod {
	preStop, _ := json.Marshal(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "1"}}})
	ports, _ := json.Marshal([]corev1.ContainerPort{{Name: "http", ContainerPort: 8080}})
	return protocol.Pod{
		Metadata: protocol.PodMetadata{Namespace: "default", Name: "web", UID: "u1", DeletionGracePeriodSeconds: deletionGrace},
		Spec: protocol.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			InitContainers: []protocol.Container{
				{Name: "setup"},
				{Name: "log", RestartPolicy: "Always"},
				{Name: "proxy", RestartPolicy: "Always"},
			},
			Containers: []protocol.Container{
				{Name: "app", Lifecycle: &protocol.Lifecycle{StopSignal: "SIGUSR1", PreStop: preStop}, Ports: ports},
				{Name: "gone"},
			},
		},
		KeptAt: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC),
	}
}

// TestRestorePodWithSpec: with the spec the agent kept, the runtime's containers are rebuilt
// from it: the sidecars as init containers in their order of declaration, each container's
// stop signal, preStop hook and ports; a container the spec does not name is an ephemeral one,
// stopped with the main containers and waited for by no sidecar; one the runtime does not hold
// is left out. The deletion's grace period is the
// shorter of the kept one and the containers' annotation, whichever is set.
func TestRestorePodWithSpec(t *testing.T) {
	t.Parallel()
	specs, errs := keptSpecs([]protocol.Pod{webSpec(nil)})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pod := restorePod(webRuntime(""))
	withSpec(pod, specs["u1"].pod)
	names := func(cs []corev1.Container) (out []string) {
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	if diff := cmp.Diff([]string{"setup", "log", "proxy"}, names(pod.Spec.InitContainers)); diff != "" {
		t.Errorf("init containers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"app"}, names(pod.Spec.Containers)); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	var ephemeral []string
	for _, c := range pod.Spec.EphemeralContainers {
		ephemeral = append(ephemeral, c.Name)
	}
	if diff := cmp.Diff([]string{"debug"}, ephemeral); diff != "" {
		t.Errorf("ephemeral containers, the runtime's the spec does not name (-want +got):\n%s", diff)
	}
	app := pod.Spec.Containers[0]
	if l := app.Lifecycle; l == nil || l.StopSignal == nil || *l.StopSignal != corev1.SIGUSR1 || l.PreStop == nil || l.PreStop.Exec == nil || len(app.Ports) != 1 {
		t.Errorf("app = %+v, want its stop signal, preStop hook and ports from the spec", app)
	}
	plan, err := executor.NewPlan(executor.Request{Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	// The sidecars wait for the spec's main container, not for debug (kubectl debug's shell):
	// the kubelet orders them after pod.spec.containers only.
	want := map[string][]string{"setup": nil, "log": {"app", "proxy"}, "proxy": {"app"}, "app": nil, "debug": nil}
	for name, waitFor := range want {
		cp := plan.Container(name)
		if cp == nil || !slices.Equal(cp.WaitFor, waitFor) || cp.Sidecar != (waitFor != nil) {
			t.Errorf("plan of %s = %+v, want sidecar %v waiting for %v", name, cp, waitFor != nil, waitFor)
		}
	}

	for _, tc := range []struct {
		annotation string // the containers' deletion grace
		kept       *int64
		want       int64
	}{
		{"", nil, 30}, {"", ptr.To[int64](4), 4}, {"10", ptr.To[int64](4), 4}, {"3", ptr.To[int64](4), 3}, {"10", nil, 10},
	} {
		specs, _ := keptSpecs([]protocol.Pod{webSpec(tc.kept)})
		pod := restorePod(webRuntime(tc.annotation))
		withSpec(pod, specs["u1"].pod)
		if got, _ := executor.GracePeriodSeconds(executor.Request{Pod: pod}); got != tc.want {
			t.Errorf("annotation %q, kept %v: grace %d, want %d", tc.annotation, tc.kept, got, tc.want)
		}
	}
}

// TestTerminateWithKeptSpec: a terminate with the spec the agent kept of pod web stops its main
// container first (app with its lifecycle.stopSignal SIGUSR1), then its sidecars in the reverse
// order of their declaration (proxy, then log), then its sandbox; debug, not in the spec, gets
// SIGTERM beside them; pod plain, with no spec kept, is restored from the runtime's labels. The log
// says, per pod, where its spec came from.
func TestTerminateWithKeptSpec(t *testing.T) {
	t.Parallel()
	rt := newFakeRuntime()
	for _, c := range webRuntime("").containers {
		rt.containers[c.Id] = c
	}
	rt.sandboxes["u1"] = &runtimeapi.PodSandbox{Id: "sandbox-u1", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Labels: map[string]string{labelPodUID: "u1", labelPodName: "web", labelPodNamespace: "default"}}
	rt.add("u3", "plain", "plain-app", runtimeapi.ContainerState_CONTAINER_RUNNING)
	var mu sync.Mutex
	var logs []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, args)
	}, funcr.Options{})
	if _, err := terminateWithSpecs(t, rt, []protocol.Pod{webSpec(nil)}, log); err != nil {
		t.Fatal(err)
	}
	var web []string
	for _, s := range rt.stopped() {
		if !strings.Contains(s, "plain") && !strings.Contains(s, "u3") {
			web = append(web, s)
		}
	}
	// debug is stopped beside the others and holds nobody up, so its signal may come at any
	// point before the sandbox's removal; the rest keep their order.
	usr1, term := syscall.SIGUSR1.String(), syscall.SIGTERM.String()
	ordered := []string{usr1 + " to app", term + " to proxy", term + " to log", "sandboxes of u1"}
	debug := slices.Index(web, term+" to debug")
	rest := slices.DeleteFunc(slices.Clone(web), func(s string) bool { return s == term+" to debug" })
	if debug < 0 || len(web) != len(rest)+1 || debug > slices.Index(web, "sandboxes of u1") || !slices.Equal(rest, ordered) {
		t.Errorf("pod web stopped as %q, want %q in that order and %q once before the sandbox", web, ordered, term+" to debug")
	}
	for _, want := range []string{`"pod"={"name"="web" "namespace"="default"} "podUID"="u1" "spec"="kept at 2026-11-23T10:00:00Z"`,
		`"pod"={"name"="plain" "namespace"="default"} "podUID"="u3" "spec"="from the runtime's labels"`} {
		if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, want) }) {
			t.Errorf("no log line holds %s:\n%s", want, strings.Join(logs, "\n"))
		}
	}
}

// terminateWithSpecs runs terminateAll on rt with the specs kept, no grace cap and nothing
// excluded.
func terminateWithSpecs(t *testing.T, rt *fakeRuntime, kept []protocol.Pod, log logr.Logger) (result, error) {
	t.Helper()
	ex := executor.New(rt)
	ex.PollInterval, ex.ExitTimeout = 10*time.Millisecond, 200*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := terminateAll(ctx, &nodeRuntime{endpoint: fakeEndpoint, exec: ex, cri: fakeCRI{f: rt}}, nil, "", kept, log)
	t.Logf("result %+v, error: %v, signals %q", res, err, rt.stopped())
	return res, err
}
