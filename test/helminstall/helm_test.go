package helminstall

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/helmtest"
	"palisade.dev/palisade/test/realscene"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/gobin"
)

const (
	// namespace is the release's namespace, the one of the scene's BMC Secret.
	namespace = scenario.SecretNamespace
	release   = "palisade"
	// imageTag is the tag the test builds the images with.
	imageTag = "v0.0.0-helmtest"
	// agentSigner is the agents' CSR signer.
	agentSigner = "palisade.dev/agent"
)

// controllerUser is the installed controller's identity in the audit log.
var controllerUser = "system:serviceaccount:" + namespace + ":" + release

// TestHelmInstallOnRealMachines installs the chart with Helm onto three real machines, with the
// images make images builds imported into each machine's containerd, and follows the release
// through its life: it runs (two controller replicas, one leading; an agent per node, each with
// a certificate the controller signed through the CSR API, heartbeating through the Service to
// the leader), it fences a machine whose power is cut so that its pod moves with never two
// copies writing, it upgrades (the CRDs with it), and it uninstalls leaving nothing behind.
func TestHelmInstallOnRealMachines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	archives := buildImages(t, ctx)
	s := realscene.Start(t, realscene.Options{Machines: 3, InCluster: true, NoCRDs: true, ImageArchives: archives})
	if _, err := s.Cluster.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := newHelm(t, s.Cluster)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the release's pods:\n%s", podLogs(s.Cluster, namespace))
			for _, m := range s.Machines {
				t.Logf("%s kube-proxy log (tail):\n%s", m.Name(), m.LogTail(realscene.KubeProxyDaemon, 15))
			}
		}
	})

	begin := time.Now()
	if err := h.install(ctx, olderChart(t), values("1")); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	// The BMC Secret, and a policy over every machine that powers a released machine back on.
	s.CreatePolicy(t, 20*time.Second, func(p *v1alpha1.FencingPolicy) { p.Spec.Recovery.PowerOn = true })
	waitRunning(t, ctx, s, "1", 4*time.Minute)
	t.Logf("installed: 2 controller replicas and 3 agents running, every agent certified and heard, %s after helm install", time.Since(begin).Round(100*time.Millisecond))
	if err := h.test(); err != nil {
		log, _ := s.Cluster.Kube.CoreV1().Pods(namespace).GetLogs(release+"-test", &corev1.PodLogOptions{}).DoRaw(ctx)
		t.Errorf("helm test: %v; the test pod's log:\n%s", err, log)
	} else {
		t.Log("helm test passed: a ready replica serves its metrics through the metrics Service")
	}

	if !t.Run("FencesAPowerCut", func(t *testing.T) { fencePowerCut(t, ctx, s) }) {
		return
	}
	if !t.Run("Upgrade", func(t *testing.T) { upgrade(t, ctx, s, h) }) {
		return
	}
	t.Run("Uninstall", func(t *testing.T) { uninstall(t, ctx, s, h) })
}

// buildImages runs make images' tool into a test directory and returns the two tarballs.
func buildImages(t *testing.T, ctx context.Context) []string {
	t.Helper()
	tool, err := gobin.Build("cmd/palisade-images")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, tool, "-version", imageTag, "-revision", strings.Repeat("0", 40),
		"-source-date-epoch", "1700000000", "-module", gobin.ModuleDir(), "-out", out)
	begin := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make images: %v\n%s", err, b)
	}
	t.Logf("built the images in %s", time.Since(begin).Round(100*time.Millisecond))
	return []string{filepath.Join(out, "palisade-controller.tar"), filepath.Join(out, "palisade-agent.tar")}
}

// revisionEnv is an environment variable of the release's pods whose value (values' revision)
// tells which revision of the release made them.
const revisionEnv = "PALISADE_TEST_REVISION"

// values are the release's values: the images built here, the scene's BMC Secret, the agents'
// kubelet-stop command for a machine (whose init has no systemd), and revision in every pod.
func values(revision string) map[string]any {
	env := []any{map[string]any{"name": revisionEnv, "value": revision}}
	return map[string]any{
		"image":               map[string]any{"tag": imageTag, "pullPolicy": "Never"},
		"bmcSecretNamespaces": []any{namespace},
		"controller":          map[string]any{"extraEnv": env},
		"agent": map[string]any{
			"image":              map[string]any{"tag": imageTag, "pullPolicy": "Never"},
			"kubeletStopCommand": "nsenter -t 1 -m -- pkill -KILL -x kubelet",
			"extraEnv":           env,
		},
	}
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(filepath.Join(gobin.ModuleDir(), "charts", "palisade"))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// verdictColumn is a printer column of the NodeFence CRD, as make generate writes it.
const verdictColumn = "    - jsonPath: .spec.verdict\n      name: Verdict\n      type: string\n"

// olderChart is the chart as an older version might have shipped it, as far as an upgrade can
// tell: its NodeFence CRD lacks the Verdict printer column, which the upgrade must add.
func olderChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch := loadChart(t)
	found := false
	for _, f := range ch.Files {
		if strings.HasSuffix(f.Name, "fencing.palisade.dev_nodefences.yaml") && strings.Contains(string(f.Data), verdictColumn) {
			f.Data, found = []byte(strings.Replace(string(f.Data), verdictColumn, "", 1)), true
		}
	}
	if !found {
		t.Fatal("the chart's NodeFence CRD has no Verdict printer column to leave out")
	}
	ch.Metadata.Version += "-older"
	return ch
}

// helm is Helm's SDK configured for the scene's API server as its admin.
type helm struct {
	cfg *action.Configuration
}

func newHelm(t *testing.T, c *testbed.Cluster) *helm {
	t.Helper()
	return &helm{cfg: helmtest.Configuration(t, c, namespace)}
}

func (h *helm) install(ctx context.Context, ch *chart.Chart, vals map[string]any) error {
	in := action.NewInstall(h.cfg)
	in.ReleaseName, in.Namespace, in.Timeout = release, namespace, 5*time.Minute
	_, err := in.RunWithContext(ctx, ch, vals)
	return err
}

func (h *helm) upgrade(ctx context.Context, ch *chart.Chart, vals map[string]any) error {
	up := action.NewUpgrade(h.cfg)
	up.Namespace, up.Timeout = namespace, 5*time.Minute
	_, err := up.RunWithContext(ctx, release, ch, vals)
	return err
}

// test runs the release's test hook (helm test): a pod that reads a ready replica's metrics
// through the metrics Service.
func (h *helm) test() error {
	rt := action.NewReleaseTesting(h.cfg)
	rt.Namespace, rt.Timeout = namespace, 2*time.Minute
	_, err := rt.Run(release)
	return err
}

func (h *helm) uninstall() error {
	un := action.NewUninstall(h.cfg)
	un.Timeout = 5 * time.Minute
	_, err := un.Run(release)
	return err
}

// waitRunning waits until the release's revision runs: both controller replicas ready and
// one leading, an agent pod ready on every machine, each with a certificate the controller
// signed, and every agent's heartbeats accepted by the leader; every pod of that revision.
func waitRunning(t *testing.T, ctx context.Context, s *realscene.Scene, revision string, timeout time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		last = releaseState(ctx, s, revision)
		return last == "", nil
	})
	if err != nil {
		t.Fatalf("the release did not run within %s: %s", timeout, last)
	}
}

// releaseState says what the release's revision still lacks to be running, "" when nothing.
func releaseState(ctx context.Context, s *realscene.Scene, revision string) string {
	c := s.Cluster.Client
	all, err := s.Cluster.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil {
		return "the release's pods: " + err.Error()
	}
	for _, p := range all.Items {
		if got := podEnv(p, revisionEnv); got != revision || p.DeletionTimestamp != nil {
			return fmt.Sprintf("pod %s is of revision %q (deleted: %v), want only pods of revision %s", p.Name, got, p.DeletionTimestamp != nil, revision)
		}
	}
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release}, dep); err != nil {
		return "the controller Deployment: " + err.Error()
	}
	if dep.Status.ReadyReplicas != 2 {
		return fmt.Sprintf("the controller Deployment has %d of 2 replicas ready", dep.Status.ReadyReplicas)
	}
	ds := &appsv1.DaemonSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-agent"}, ds); err != nil {
		return "the agent DaemonSet: " + err.Error()
	}
	if int(ds.Status.NumberReady) != len(s.Machines) {
		return fmt.Sprintf("the agent DaemonSet has %d of %d pods ready", ds.Status.NumberReady, len(s.Machines))
	}
	if leaders := podsLabelled(ctx, s.Cluster, "palisade.dev/agent-endpoint=true"); len(leaders) != 1 {
		return fmt.Sprintf("%d controller pods carry the heartbeat Service's leader label, want 1", len(leaders))
	}
	csrs := &certificatesv1.CertificateSigningRequestList{}
	if err := c.List(ctx, csrs); err != nil {
		return "CSRs: " + err.Error()
	}
	certified := map[string]bool{}
	for _, csr := range csrs.Items {
		if csr.Spec.SignerName == agentSigner && len(csr.Status.Certificate) > 0 {
			certified[strings.TrimPrefix(csr.Spec.Username, "system:serviceaccount:")] = true
		}
	}
	if len(certified) == 0 {
		return "no agent CSR has a certificate yet"
	}
	for _, p := range podsLabelled(ctx, s.Cluster, "app.kubernetes.io/component=agent") {
		log, err := s.Cluster.Kube.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return fmt.Sprintf("agent %s's log: %v", p.Name, err)
		}
		if !strings.Contains(string(log), "heartbeats accepted by the controller") {
			return fmt.Sprintf("agent %s on %s has had no heartbeat accepted yet", p.Name, p.Spec.NodeName)
		}
	}
	return ""
}

// podEnv is the value of the environment variable name of p's first container.
func podEnv(p corev1.Pod, name string) string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func podsLabelled(ctx context.Context, c *testbed.Cluster, selector string) []corev1.Pod {
	pods, err := c.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil
	}
	return pods.Items
}

// podLogs is the tail of every container log of the namespace's pods, for a failure.
func podLogs(c *testbed.Cluster, ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "--- pod %s on %s: %s\n", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "    container %s ready=%v restarts=%d state=%+v\n", cs.Name, cs.Ready, cs.RestartCount, cs.State)
		}
		for _, ctr := range p.Spec.Containers {
			log, err := c.Kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name, TailLines: ptr.To(int64(25))}).DoRaw(ctx)
			if err != nil {
				fmt.Fprintf(&b, "    log of %s: %v\n", ctr.Name, err)
				continue
			}
			fmt.Fprintf(&b, "    log of %s:\n%s\n", ctr.Name, log)
		}
	}
	return b.String()
}

// fencePowerCut cuts the power of the machine that runs the witness pod db-0 and waits for
// the installed release to fence it (IPMI power-off confirmed) and release the pod, which the
// StatefulSet starts again elsewhere; the witness store's history has one copy of db-0
// writing at any time, and the audit log no release before the confirmed fence. Then the
// release powers the machine back on and, once it is back with a new boot ID, unfences it.
func fencePowerCut(t *testing.T, ctx context.Context, s *realscene.Scene) {
	s.DeployWitness(t, 1)
	first, firstUID := s.WaitWriter(t, realscene.PodName(0), "", time.Minute)
	time.Sleep(3 * time.Second) // db-0 writes a while before its machine dies
	bmc := s.BMC(first)
	cut := time.Now()
	if err := bmc.SetPower(false); err != nil {
		t.Fatal(err)
	}
	t.Logf("power of %s cut", first)
	// The replacement may land on first itself: recovery.powerOn brings it back, rebooted, about
	// a second after the release, and the taint-eviction controller may delete the replacement
	// scheduled elsewhere meanwhile (it evicts by name, and the new copy has db-0's name).
	second, _ := s.WaitNewWriter(t, realscene.PodName(0), firstUID, 4*time.Minute)
	t.Logf("db-0 writes from %s %s after %s lost its power", second, time.Since(cut).Round(100*time.Millisecond), first)
	time.Sleep(3 * time.Second) // were two copies running, both would write meanwhile
	var fence v1alpha1.NodeFence
	if err := s.Cluster.Client.Get(ctx, client.ObjectKey{Name: first}, &fence); err != nil {
		t.Fatalf("the NodeFence of %s: %v", first, err)
	}
	// Released, and with recovery.powerOn perhaps already powered on and recovered.
	if fence.Status.ReleasedTime == nil || fence.Status.FencedTime == nil || fence.Status.Method != "ipmi" {
		t.Errorf("the NodeFence of %s is %s (fenced %v by %q, released %v): want a release after a confirmed IPMI fence",
			first, fence.Status.Phase, fence.Status.FencedTime, fence.Status.Method, fence.Status.ReleasedTime)
	}
	hist, evs := s.History(t), s.Audit(t)
	v := append(checker.OneCopy(hist, 0), checker.NoEarlyRelease(evs, []string{controllerUser})...)
	t.Logf("%d witness records, %d audit events; %s", len(hist), len(evs), checker.Report(v))
	if len(v) > 0 {
		t.Errorf("%d violations", len(v))
	}
	if n := writesBy(evs, controllerUser, "nodefences"); n == 0 {
		t.Errorf("the audit log shows no NodeFence written by %s: the installed release did not fence", controllerUser)
	}
	waitRecovered(t, ctx, s, first, 4*time.Minute)
	t.Logf("%s powered back on by the release, rebooted and unfenced %s after its power was cut", first, time.Since(cut).Round(100*time.Millisecond))
}

// writesBy counts the accepted writes of user to resource in the audit log.
func writesBy(evs []checker.Event, user, resource string) int {
	n := 0
	for _, e := range evs {
		if e.User.Username == user && e.ObjectRef.Resource == resource {
			n++
		}
	}
	return n
}
