package podspecs

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/providers/agent/apiclient"
	"palisade.dev/palisade/providers/executor/protocol"
	"palisade.dev/palisade/test/agentapi"
	"palisade.dev/palisade/test/testbed"
)

// webPod is a pod bound to node with a regular init container, two sidecars and a main
// container with a preStop hook, a stop signal and a port.
func webPod(name, node string) *corev1.Pod {
	always := ptr.To(corev1.ContainerRestartPolicyAlways)
	c := func(name string) corev1.Container { return corev1.Container{Name: name, Image: "busybox"} }
	app := c("app")
	app.Lifecycle = &corev1.Lifecycle{StopSignal: ptr.To(corev1.SIGUSR1),
		PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "2"}}}}
	app.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	log, proxy := c("log"), c("proxy")
	log.RestartPolicy, proxy.RestartPolicy = always, always
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](45), OS: &corev1.PodOS{Name: corev1.Linux},
			InitContainers: []corev1.Container{c("setup"), log, proxy}, Containers: []corev1.Container{app}},
	}
}

// start runs a control plane, with Nodes n1 and n2, and returns it with a client that
// authenticates as the chart's agents do (agentapi).
func start(t *testing.T) (*testbed.Cluster, *apiclient.Client) {
	t.Helper()
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, CRDDirs: []string{}, Controllers: []string{"serviceaccount-token-controller"},
		FeatureGates: "ContainerStopSignals=true"})
	ctx := context.Background()
	for _, n := range []string{"n1", "n2"} {
		if _, err := c.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	args, err := agentapi.Args(ctx, c.Kube, c.Config.CAData, t.TempDir(), c.Config.Host, "")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]string{}
	for i := 0; i+1 < len(args); i += 2 {
		flags[args[i]] = args[i+1]
	}
	api, err := apiclient.New(flags["--api-server"], flags["--api-token-file"], flags["--api-ca-file"])
	if err != nil {
		t.Fatal(err)
	}
	return c, api
}

// waitKept waits until the Keeper's specs satisfy ok.
func waitKept(t *testing.T, k *Keeper, what string, ok func(map[string]protocol.Pod) bool) map[string]protocol.Pod {
	t.Helper()
	var byName map[string]protocol.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		byName = map[string]protocol.Pod{}
		for _, p := range k.Pods() {
			byName[p.Metadata.Name] = p
		}
		return ok(byName), nil
	})
	if err != nil {
		t.Fatalf("waiting until %s: kept %d pods", what, len(byName))
	}
	return byName
}

// readFile reads File in dir.
func readFile(t *testing.T, dir string) stored {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		t.Fatal(err)
	}
	var s stored
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKeeperFollowsItsNodesPods runs the Keeper against a real API server with the chart's
// agent rules: it keeps the pods bound to its node and no other (all 56 of them, more than a
// page of the list), with the fields the executor needs; it takes a graceful deletion's grace
// period as it happens, and drops a pod once it is gone from the API server, in memory and in
// File. Once the API server stops, the Keeper keeps what it had; one started again meanwhile
// (an agent restarted on the self-fence path) has the specs from File, and keeps them while
// its lists fail.
func TestKeeperFollowsItsNodesPods(t *testing.T) {
	c, api := start(t)
	ctx := context.Background()
	pods := c.Kube.CoreV1().Pods("default")
	for _, p := range []*corev1.Pod{webPod("web", "n1"), webPod("elsewhere", "n2")} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 55 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("filler-", i)},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	k := New(api, Config{Node: "n1", StateDir: dir, Retry: 100 * time.Millisecond}, testr.New(t))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { k.Run(runCtx); close(done) }()
	started := time.Now()
	kept := waitKept(t, k, "56 pods are kept", func(m map[string]protocol.Pod) bool { return len(m) == 56 })
	t.Logf("MEASURED 56 pods kept %.3fs after the start", time.Since(started).Seconds())
	checkWeb(t, kept)
	if s := readFile(t, dir); s.Node != "n1" || len(s.Pods) != 56 {
		t.Errorf("%s holds %d pods of node %q, want 56 of n1", File, len(s.Pods), s.Node)
	}

	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](3)}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "filler-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitKept(t, k, "web's deletion grace is kept and filler-0 dropped", func(m map[string]protocol.Pod) bool {
		g := m["web"].Metadata.DeletionGracePeriodSeconds
		_, filler := m["filler-0"]
		return g != nil && *g == 3 && !filler
	})
	s := readFile(t, dir)
	i := slices.IndexFunc(s.Pods, func(p protocol.Pod) bool { return p.Metadata.Name == "web" })
	if len(s.Pods) != 55 || i < 0 || s.Pods[i].Metadata.DeletionGracePeriodSeconds == nil || *s.Pods[i].Metadata.DeletionGracePeriodSeconds != 3 {
		t.Errorf("%s holds %d pods, web at %d: want 55, web with its deletion grace of 3 s", File, len(s.Pods), i)
	}
	if err := c.StopAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the watch ends, the lists fail
	if n := len(k.Pods()); n != 55 {
		t.Errorf("%d pods kept once the API server stopped, want the 55 kept before", n)
	}
	stop()
	<-done

	// The agent restarted while the API server is out of reach: the specs on disk.
	again := New(api, Config{Node: "n1", StateDir: dir, Retry: 10 * time.Millisecond}, testr.New(t))
	runCtx, stop = context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	again.Run(runCtx)
	byName := map[string]protocol.Pod{}
	for _, p := range again.Pods() {
		byName[p.Metadata.Name] = p
	}
	if g := byName["web"].Metadata.DeletionGracePeriodSeconds; len(byName) != 55 || g == nil || *g != 3 {
		t.Errorf("restarted without the API server: %d pods kept, web %+v; want 55, web being deleted with a grace of 3 s", len(byName), byName["web"].Metadata)
	}
	checkWeb(t, byName)
}

// checkWeb checks what was kept of pod web.
func checkWeb(t *testing.T, kept map[string]protocol.Pod) {
	t.Helper()
	if _, ok := kept["elsewhere"]; ok {
		t.Error("a pod of another node was kept")
	}
	web, ok := kept["web"]
	if !ok {
		t.Fatal("pod web not kept")
	}
	var policies []string
	for _, c := range web.Spec.InitContainers {
		policies = append(policies, c.Name+":"+c.RestartPolicy)
	}
	if !slices.Equal(policies, []string{"setup:", "log:Always", "proxy:Always"}) {
		t.Errorf("web's init containers %q, want setup, then the sidecars log and proxy", policies)
	}
	app := web.Spec.Containers[0]
	var preStop corev1.LifecycleHandler
	var ports []corev1.ContainerPort
	if app.Lifecycle == nil || app.Lifecycle.StopSignal != "SIGUSR1" || json.Unmarshal(app.Lifecycle.PreStop, &preStop) != nil ||
		preStop.Exec == nil || json.Unmarshal(app.Ports, &ports) != nil || len(ports) != 1 || ports[0].Name != "http" {
		t.Errorf("web's app %+v, want its stop signal SIGUSR1, its preStop hook and its port", app)
	}
	if g := web.Spec.TerminationGracePeriodSeconds; g == nil || *g != 45 || web.Metadata.UID == "" || web.KeptAt.IsZero() {
		t.Errorf("web %+v, want a grace period of 45 s, a UID and when it was kept", web)
	}
}

// A proxy that ends every watch at once, after lists that succeed: the Keeper backs off as for
// any failure (100 ms doubling) instead of listing again every retry for ever. A stand-in API
// server: the real one does not end its watches at once.
func TestWatchEndedAtOnceBacksOff(t *testing.T) {
	var lists atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.RawQuery, "watch=") {
			lists.Add(1)
			_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}`))
			return
		}
		// the watch: ended at once, no event
	}))
	defer srv.Close()
	api := agentapi.StandIn(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	New(api, Config{Node: "n1", Retry: 100 * time.Millisecond}, logr.Discard()).Run(ctx)
	// 100+200+400+800+1600 ms: 5 or 6 lists in 3 s; without the back-off, one every 100 ms.
	t.Logf("%d lists in 3 s", lists.Load())
	if n := lists.Load(); n > 7 {
		t.Errorf("%d lists in 3 s with every watch ended at once, want at most 7 (a back-off)", n)
	}
}
