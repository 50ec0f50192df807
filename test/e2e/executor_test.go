package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/orders"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed/containerd"
)

const workloadImage = "palisade.test/workload:1"

// executorScene is a scene whose policy starts with the Executor, node 1's agent heartbeating
// to the controller over mTLS, and a workload container that ignores SIGTERM running on a real
// containerd as node 1's runtime.
type executorScene struct {
	env   *scenario.Env
	ctr   *containerd.Containerd
	pod   *containerd.RunningPod
	w     *scenario.Workload
	dir   string            // certificates and the agent binary
	files map[string]string // certificate files by name (writeCerts)
	addr  string            // the controller's heartbeat server
	// kubeletURL is the kubelet stand-in's healthz; it fails once the file kubeletStopped
	// exists (the agent's kubelet-stop command touches it).
	kubeletURL, kubeletStopped string
}

// sceneOptions shape an executorScene.
type sceneOptions struct {
	kubeletHealthy bool
	methods        func(ipmi v1alpha1.Method) []v1alpha1.Method
	workload       []string // the workload container's command; default: ignores SIGTERM
}

func startExecutorScene(t *testing.T, o sceneOptions) *executorScene {
	t.Helper()
	ctx := context.Background()
	env := startScene(t, scenario.Options{Policy: func(p *v1alpha1.FencingPolicy) {
		p.Spec.Methods = o.methods(p.Spec.Methods[0])
	}})
	ctr := containerd.StartT(t)
	if o.workload == nil {
		o.workload = []string{"sh", "-c", "trap '' TERM; while true; do sleep 1; done"}
	}
	if err := ctr.ImportImage(ctx, containerd.Image{Name: workloadImage, Cmd: o.workload}); err != nil {
		t.Fatal(err)
	}
	pod, err := ctr.RunPod(ctx, containerd.Pod{Name: "db-0", Namespace: "default", UID: "db-0-uid",
		Containers: []containerd.Container{{Name: "db", Image: workloadImage}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	files, addr := writeCerts(t, dir, ca), freeAddr(t)
	err = env.StartController(ctx, func(o *app.Options) {
		o.Agents = channel.ServerOptions{Addr: addr, CertFile: files["server.crt"], KeyFile: files["server.key"], CAFile: files["ca.crt"]}
	})
	if err != nil {
		t.Fatal(err)
	}
	w := deploy(t, env)
	// The kubelet stand-in's healthz: failing when it has died, or once the agent's
	// kubelet-stop command stopped it (the file it touches).
	stopped := filepath.Join(dir, "kubelet-stopped")
	kubelet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if _, err := os.Stat(stopped); !o.kubeletHealthy || err == nil {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(kubelet.Close)
	return &executorScene{env: env, ctr: ctr, pod: pod, w: w, dir: dir, files: files, addr: addr, kubeletURL: kubelet.URL, kubeletStopped: stopped}
}

// agent starts node 1's agent, heartbeating to controller (the scene's server, or a link to it),
// with the scene's containerd as its runtime.
func (s *executorScene) agent(t *testing.T, controller string, extra ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"--cri-endpoint", s.ctr.Socket, "--kubelet-stop-command", "touch " + s.kubeletStopped}, extra...)
	return startAgent(t, s.dir, controller, s.env.Node(1).Name(), s.kubeletURL, s.files, args...)
}

// diesWithPower kills node 1's agent when node 1's BMC turns its power off, as a power-off
// would on a real machine (the agent runs on the test's host).
func (s *executorScene) diesWithPower(t *testing.T, agent *exec.Cmd) {
	n1 := s.env.Node(1)
	go func(ctx context.Context) {
		for ctx.Err() == nil {
			if on, err := n1.BMC.PoweredOn(); err == nil && !on {
				_ = agent.Process.Kill()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}(t.Context())
}

// agentTokenFile is where node 1's agent records the highest fencing token it took (the
// --state-dir startAgent gives it).
func (s *executorScene) agentTokenFile() string {
	return filepath.Join(s.dir, s.env.Node(1).Name()+"-state", orders.TokenFile)
}

// agentToken is the token node 1's agent recorded, "" for none.
func (s *executorScene) agentToken(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(s.agentTokenFile())
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

func executorMethod(timeout time.Duration) v1alpha1.Method {
	return v1alpha1.Method{Name: "executor", Type: v1alpha1.MethodExecutor, Timeout: &metav1.Duration{Duration: timeout},
		Executor: &v1alpha1.ExecutorMethod{GracePeriodSeconds: ptr.To[int64](2)}}
}

// workloadRunning says whether the workload container's task still runs on containerd.
func (s *executorScene) workloadRunning(t *testing.T) bool {
	t.Helper()
	out, err := s.ctr.Ctr(context.Background(), "tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, s.pod.ContainerIDs["db"]) && strings.Contains(line, "RUNNING") {
			return true
		}
	}
	return false
}

// A node whose Lease stops while its agent still heartbeats straight to the controller is fenced
// by the node-side executor over the direct channel, not by power-off: the container is
// terminated on the real runtime, the agent's read-back confirms it, and only then the node is
// released. KubeletDown: the kubelet died. Partitioned: the kubelet is healthy but cut off from
// the API server.
func TestExecutorFencesLiveNode(t *testing.T) {
	for _, tc := range []struct {
		verdict        string
		kubeletHealthy bool
	}{{"KubeletDown", false}, {"Partitioned", true}} {
		t.Run(tc.verdict, func(t *testing.T) { executorFences(t, tc.verdict, tc.kubeletHealthy) })
	}
}

func executorFences(t *testing.T, verdict string, kubeletHealthy bool) {
	s := startExecutorScene(t, sceneOptions{kubeletHealthy: kubeletHealthy, methods: func(ipmi v1alpha1.Method) []v1alpha1.Method {
		return []v1alpha1.Method{executorMethod(30 * time.Second), ipmi}
	}})
	// A node whose kubelet is down still sees the API server: its agent gets orders there. A
	// partitioned node does not: its agent has no API access at all here.
	var api []string
	if verdict == "KubeletDown" {
		api = agentAPIArgs(t, s.env, "", "")
	}
	s.agent(t, s.addr, api...)
	n1 := s.env.Node(1)
	n1.PauseHeartbeats()
	nf := waitFence(t, s.env.Cluster, n1.Name(), 90*time.Second, phaseIs(v1alpha1.PhaseReleased))
	want := []string{"Terminate:Succeeded", "ConfirmTerminated:Succeeded", "VerifyFenced:Succeeded", "Taint:Succeeded", "DeletePods:Succeeded", "ReleaseAttachments:Succeeded"}
	if diff := cmp.Diff(want, trace(nf)); diff != "" {
		t.Errorf("step trace (-want +got):\n%s", diff)
	}
	wantVia, answered := "over the direct channel", false
	if verdict == "KubeletDown" {
		wantVia, answered = "through the API server", true
	}
	if msg := stepMessage(nf, "Terminate"); !strings.Contains(msg, wantVia) {
		t.Errorf("Terminate step %q, want the order sent %s", msg, wantVia)
	}
	if _, ok := nf.Annotations[v1alpha1.AnnotationExecutorStatus]; ok != answered || nf.Spec.Verdict != verdict {
		t.Errorf("verdict %q, agent's answer on the NodeFence: %v (%q); want verdict %s and an answer there: %v",
			nf.Spec.Verdict, ok, nf.Annotations[v1alpha1.AnnotationExecutorStatus], verdict, answered)
	}
	if verdict == "KubeletDown" {
		// The order goes when its fence ends: left on the NodeFence, which outlives the fence,
		// an agent restarted later would take it for a new one.
		var order string
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			now := &v1alpha1.NodeFence{}
			if err := s.env.Cluster.Client.Get(ctx, client.ObjectKey{Name: n1.Name()}, now); err != nil {
				return false, err
			}
			order = now.Annotations[v1alpha1.AnnotationExecutorCommand]
			return order == "", nil
		})
		if err != nil {
			t.Errorf("the order %s is still on the NodeFence 10 s after its fence was released (%v)", order, err)
		}
	}
	if !strings.HasPrefix(nf.Spec.Reason, verdict) || nf.Status.Method != "executor" {
		t.Errorf("reason %q method %q, want a %s verdict fenced by the executor", nf.Spec.Reason, nf.Status.Method, verdict)
	}
	if s.workloadRunning(t) {
		t.Error("the workload container still runs on containerd after a confirmed termination")
	}
	// The order carried the fence's token, and the agent recorded it on its disk first.
	if got := s.agentToken(t); nf.Status.Token < 1 || got != strconv.FormatInt(nf.Status.Token, 10) {
		t.Errorf("the fence's token %d, the agent's recorded token %q: want the same, at least 1", nf.Status.Token, got)
	}
	if offs, err := n1.BMC.OffCommands(); err != nil || offs != 0 {
		t.Errorf("%d power-off commands reached the BMC (err %v); the executor should have been enough", offs, err)
	}
	if _, err := s.env.WaitPodRunning(context.Background(), "", n1.Name(), time.Minute); err != nil {
		t.Fatal(err)
	}
}

// An agent that reports success while its container still runs is caught by the controller's
// confirmation (the agent's runtime read-back), and nothing is released. The fault is injected
// on the channel through the API server; the direct channel's check is the same code (judge).
func TestLyingAgentIsCaught(t *testing.T) {
	s := startExecutorScene(t, sceneOptions{methods: func(v1alpha1.Method) []v1alpha1.Method {
		return []v1alpha1.Method{executorMethod(8 * time.Second)}
	}})
	// Its kubelet is down (KubeletDown): the order and the lying answer go through the API server.
	s.agent(t, s.addr, append(agentAPIArgs(t, s.env, "", ""), "--fault-report-confirmed-early")...)
	n1 := s.env.Node(1)
	n1.PauseHeartbeats()
	nf := waitFence(t, s.env.Cluster, n1.Name(), 90*time.Second, phaseIs(v1alpha1.PhaseFailed))
	if st, reason, msg := condition(nf, v1alpha1.ConditionFenced); st != "False" || reason != "MethodTimedOut" || !strings.Contains(msg, "running") {
		t.Errorf("Fenced condition = %s/%s (%s), want False/MethodTimedOut naming running containers", st, reason, msg)
	}
	if !s.workloadRunning(t) {
		t.Error("the workload container is gone: the fault injection did not leave it running, so the test proves nothing")
	}
	assertNothingReleased(t, s.env, s.w)
}
