package e2e

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/helmtest"
	"palisade.dev/palisade/test/scenario"
)

const (
	helmRelease = "palisade"
	// chartSA is the chart's ServiceAccount for release "palisade": its full name.
	chartSA = "palisade"
)

// The chart's ServiceAccount and RBAC, installed with Helm into the real API server, are all
// the real binary needs: running as that ServiceAccount it takes a manual fence request on a
// node with a pod and a volume attachment to Released without a single "forbidden".
func TestHelmChartRBACIsEnough(t *testing.T) {
	env := startScene(t, scenario.Options{})
	ctx := context.Background()
	node := env.Node(2).Name()
	w, err := env.DeployDatabase(ctx, env.Node(2))
	if err != nil {
		t.Fatalf("deploying database: %v", err)
	}
	installChart(t, env, nil)
	kubeconfig := serviceAccountKubeconfig(t, env, scenario.SecretNamespace, chartSA)

	p := startBinary(t, kubeconfig, buildController(t))
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(p.stderr.Name())
			t.Logf("controller log:\n%s", b)
		}
	}()

	waitHTTP(t, p.health+"/readyz", "ok")
	waitLeader(t, env, "")
	patchAnnotations(t, env, node, map[string]any{v1alpha1.AnnotationFenceRequest: "helm RBAC test"})
	nf := waitFence(t, env.Cluster, node, time.Minute, phaseIs(v1alpha1.PhaseReleased))
	t.Logf("fence released: %d pods deleted, %d attachments released; steps %v", nf.Status.PodsDeleted, nf.Status.AttachmentsReleased, trace(nf))
	for _, s := range nf.Status.Steps {
		if strings.Contains(strings.ToLower(s.Message), "forbidden") {
			t.Errorf("step %s of the fence was denied something: %s", s.Name, s.Message)
		}
	}

	if nf.Status.PodsDeleted < 1 {
		t.Errorf("pods deleted = %d, want the database pod at least", nf.Status.PodsDeleted)
	}
	pod := &corev1.Pod{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(w.Pod), pod); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	} else if err == nil && pod.UID == w.Pod.UID {
		t.Errorf("pod %s (uid %s) is still there after the release", pod.Name, pod.UID)
	}
	if vas, err := env.Attachments(ctx, node); err != nil || len(vas) != 0 {
		t.Errorf("%d attachments left on %s (err %v)", len(vas), node, err)
	}
	n := &corev1.Node{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	tainted := false
	for _, taint := range n.Spec.Taints {
		tainted = tainted || taint.Key == v1alpha1.TaintOutOfService
	}
	if !tainted {
		t.Errorf("node %s has no %s taint: %v", node, v1alpha1.TaintOutOfService, n.Spec.Taints)
	}
	// A graceful stop flushes the event recorders and releases the leader-election Lease, so
	// their calls are in the log too.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("palisade-controller did not stop cleanly: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("palisade-controller did not stop within 30s of SIGTERM")
	}
	assertNoForbidden(t, p.stderr.Name())
}

// installChart installs charts/palisade as release "palisade" in palisade-system with the
// Helm SDK, as the admin, without its CRDs (crds.enabled=false: the test bed installed them,
// and Helm does not take over objects it did not create); extra values are merged over the
// test's own.
func installChart(t *testing.T, env *scenario.Env, extra map[string]any) {
	t.Helper()
	ch, err := loader.Load("../../charts/palisade")
	if err != nil {
		t.Fatalf("loading chart: %v", err)
	}
	cfg := helmtest.Configuration(t, env.Cluster, scenario.SecretNamespace)
	install := action.NewInstall(cfg)
	install.ReleaseName = helmRelease
	install.Namespace = scenario.SecretNamespace
	install.CreateNamespace = false
	vals := map[string]any{
		"crds":           map[string]any{"enabled": false},
		"replicaCount":   1,
		"leaderElection": map[string]any{"enabled": true},
	}
	for k, v := range extra {
		vals[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rel, err := install.RunWithContext(ctx, ch, vals)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("helm installed release %s, revision %d, status %s", rel.Name, rel.Version, rel.Info.Status)
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the ServiceAccount with
// a bound token from the TokenRequest API.
func serviceAccountKubeconfig(t *testing.T, env *scenario.Env, ns, sa string) string {
	t.Helper()
	tr, err := env.Cluster.Kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", ns, sa, err)
	}
	const name = "palisade-sa"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: env.Cluster.Config.Host, CertificateAuthorityData: env.Cluster.Config.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: ns}
	kc.CurrentContext = name
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	// The kubeconfig is the ServiceAccount, not the admin.
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kube.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("reviewing the ServiceAccount token: %v", err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:"+ns+":"+sa; got != want {
		t.Fatalf("the kubeconfig authenticates as %q, want %q", got, want)
	}
	return path
}

// assertNoForbidden fails on any log line of the controller that reports an RBAC denial.
func assertNoForbidden(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		if strings.Contains(strings.ToLower(sc.Text()), "forbidden") {
			t.Errorf("the controller was denied something: %.500s", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// The chart's RBAC covers storage fences and recovery: running as the chart's ServiceAccount,
// the real binary puts up a NetworkFence for a node that lost its power, releases the node, and
// when the node is back rebooted unfences it — lifts the storage fence and removes the taint —
// without a single "forbidden".
func TestHelmChartRBACCoversStorageFences(t *testing.T) {
	env := startScene(t, scenario.Options{CSIAddons: true, Policy: func(p *v1alpha1.FencingPolicy) {
		p.Spec.Methods = []v1alpha1.Method{storageFence("")}
	}})
	ctx := context.Background()
	n1 := env.Node(1)
	installChart(t, env, nil)
	p := startBinary(t, serviceAccountKubeconfig(t, env, scenario.SecretNamespace, chartSA), buildController(t))
	waitHTTP(t, p.health+"/readyz", "ok")
	waitLeader(t, env, "")
	if err := n1.BMC.SetPower(false); err != nil {
		t.Fatal(err)
	}
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, fenceEnded)
	if nf.Status.Phase != v1alpha1.PhaseReleased || !env.Cluster.CSIAddons.IsFenced(nodeCIDR(t, env, n1.Name())) {
		t.Fatalf("phase %s, storage fences %v: want Released behind the node's storage fence; steps %v", nf.Status.Phase, env.Cluster.CSIAddons.Fenced(), trace(nf))
	}
	if err := n1.BMC.SetPower(true); err != nil {
		t.Fatal(err)
	}
	nf = waitFence(t, env.Cluster, n1.Name(), time.Minute, func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseRecovered })
	if r := nf.Status.Recovery; r == nil || r.How != v1alpha1.RecoveryRebooted {
		t.Errorf("recovery %+v, want Rebooted", nf.Status.Recovery)
	}
	if got := env.Cluster.CSIAddons.Fenced(); len(got) != 0 {
		t.Errorf("the storage still fences %v after the recovery", got)
	}
	if err := env.Cluster.Client.Delete(ctx, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, env, n1.Name())
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	assertNoForbidden(t, p.stderr.Name())
}
