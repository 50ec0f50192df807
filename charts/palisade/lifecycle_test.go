package palisade_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	"palisade.dev/palisade/cmd/palisade-controller/uninstall"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/sight"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/testbed"
)

var crdNames = []string{"fencingpolicies.fencing.palisade.dev", "nodefences.fencing.palisade.dev"}

// TestHelmLifecycle follows a release through install, upgrade and uninstall with the Helm SDK
// against the real API server, which starts without Palisade's CRDs: the install creates them;
// an upgrade whose chart changes a CRD changes it in the cluster, NodeFences kept; uninstall
// runs the cleanup hook — its Job played by the test, which runs the Job's command with the
// Job's arguments under the Job's ServiceAccount and reports the outcome in the Job's status —
// then leaves the CRDs and every NodeFence, the nodes without Palisade's finalizer but fenced
// ones still tainted, none of the controller's run-time objects and none of the hook's. A new
// install takes the kept CRDs over; upgraded with crds.keep=false, its uninstall deletes them.
func TestHelmLifecycle(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, CRDDirs: []string{},
		Controllers: []string{"serviceaccount-token-controller", "deployment-controller", "replicaset-controller"}})
	ctx := t.Context()
	cfg := helmConfig(t, c)
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.Timeout = "palisade", namespace, time.Minute
	if _, err := install.RunWithContext(ctx, loadChart(t), nil); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	crds := crdClient(t, c)
	checkCRDs(t, crds, true, "")

	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace, upgrade.Timeout = namespace, time.Minute
	if _, err := upgrade.RunWithContext(ctx, "palisade", withShortName(t, loadChart(t), "nfence"), nil); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	checkCRDs(t, crds, true, "nfence")

	leftByController(t, ctx, c)
	stop := playJob(t, c)
	un := action.NewUninstall(cfg)
	un.Timeout = 2 * time.Minute
	res, err := un.Run("palisade")
	stop()
	if err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	t.Logf("helm uninstall: %s", res.Info)
	checkCRDs(t, crds, true, "nfence")
	checkUninstalled(t, ctx, c)

	install = action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.Timeout = "palisade", namespace, time.Minute
	if _, err := install.RunWithContext(ctx, loadChart(t), nil); err != nil {
		t.Fatalf("helm install over the kept CRDs: %v", err)
	}
	checkCRDs(t, crds, true, "")
	if _, err := upgrade.RunWithContext(ctx, "palisade", loadChart(t), map[string]any{"crds": map[string]any{"keep": false}}); err != nil {
		t.Fatalf("helm upgrade --set crds.keep=false: %v", err)
	}
	checkCRDs(t, crds, false, "")
	un = action.NewUninstall(cfg)
	un.DisableHooks, un.Timeout = true, time.Minute
	if _, err := un.Run("palisade"); err != nil {
		t.Fatalf("helm uninstall with crds.keep=false: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list := &apiextensionsv1.CustomResourceDefinitionList{}
		return len(list.Items) == 0, crds.List(ctx, list)
	})
	if err != nil {
		t.Errorf("the CRDs are still there after uninstalling with crds.keep=false: %v", err)
	}
}

// crdClient reads CRDs (the test bed's scheme does not hold them).
func crdClient(t *testing.T, c *testbed.Cluster) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(c.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return crds
}

// withShortName is ch with one more short name for NodeFences: a CRD change to upgrade to.
func withShortName(t *testing.T, ch *chart.Chart, name string) *chart.Chart {
	t.Helper()
	for _, f := range ch.Files {
		if f.Name == "files/crds/fencing.palisade.dev_nodefences.yaml" {
			old := []byte("    shortNames:\n    - nf\n")
			if !bytes.Contains(f.Data, old) {
				t.Fatalf("%s: no short names to add to", f.Name)
			}
			f.Data = bytes.Replace(f.Data, old, []byte(string(old)+"    - "+name+"\n"), 1)
			return ch
		}
	}
	t.Fatal("the chart has no NodeFence CRD")
	return nil
}

// checkCRDs: both CRDs are there, with the keep annotation or not, and the NodeFence CRD with
// shortName among its short names (unless "").
func checkCRDs(t *testing.T, crds client.Client, keep bool, shortName string) {
	t.Helper()
	for _, name := range crdNames {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(t.Context(), client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		if got := crd.Annotations[keepPolicy] == "keep"; got != keep {
			t.Errorf("CRD %s: kept on uninstall %v, want %v (annotations %v)", name, got, keep, crd.Annotations)
		}
		if name == crdNames[1] && shortName != "" && !slices.Contains(crd.Spec.Names.ShortNames, shortName) {
			t.Errorf("CRD %s: short names %v lack %s: the upgrade did not reach it", name, crd.Spec.Names.ShortNames, shortName)
		}
	}
}

// leftByController creates what a running controller leaves: its finalizer on two nodes, one of
// them fenced (out-of-service taint, NodeFence), the agents' CA Secret and ConfigMap and its
// three Leases; and a Lease that is not its own.
func leftByController(t *testing.T, ctx context.Context, c *testbed.Cluster) {
	t.Helper()
	meta := func(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
	pal := []string{v1alpha1.FinalizerFenceOnDelete}
	objs := []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Finalizers: pal},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-2", Finalizers: pal}},
		&v1alpha1.NodeFence{ObjectMeta: meta("", "worker-1"), Spec: v1alpha1.NodeFenceSpec{NodeName: "worker-1", Trigger: v1alpha1.TriggerManual,
			Methods: []v1alpha1.Method{{Name: "m", Type: v1alpha1.MethodExecutor}}}},
		&corev1.Secret{ObjectMeta: meta(namespace, "palisade-agent-ca")},
		&corev1.ConfigMap{ObjectMeta: meta(namespace, "palisade-agent-ca")},
		&coordinationv1.Lease{ObjectMeta: meta(namespace, app.LeaderElectionID)},
		&coordinationv1.Lease{ObjectMeta: meta(namespace, fencing.TokenLeaseName)},
		&coordinationv1.Lease{ObjectMeta: meta("kube-node-lease", sight.CanaryName)},
		&coordinationv1.Lease{ObjectMeta: meta(namespace, "other")},
	}
	for _, obj := range objs {
		if err := c.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// playJob stands in for the Job controller and the kubelet: once Helm creates the uninstall
// Job, it runs `palisade-controller uninstall` with the Job's arguments as the Job's
// ServiceAccount, and marks the Job complete, or failed with the error. The returned function
// waits for it and logs the command's log.
func playJob(t *testing.T, c *testbed.Cluster) func() {
	done := make(chan struct{})
	var logs []string
	var errs []error
	go func() {
		defer close(done)
		ctx := t.Context()
		job := &batchv1.Job{}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "palisade-uninstall"}, job)
			return err == nil, client.IgnoreNotFound(err)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("no uninstall Job: %w", err))
			return
		}
		runErr := runJob(ctx, c, job, func(line string) { logs = append(logs, line) })
		if runErr != nil {
			errs = append(errs, fmt.Errorf("the uninstall Job's command: %w", runErr))
		}
		if err := finishJob(ctx, c, job, runErr); err != nil {
			errs = append(errs, fmt.Errorf("marking the uninstall Job finished: %w", err))
		}
	}()
	t.Cleanup(func() { <-done }) // never outlives the test, even one that failed before stop
	return func() {
		<-done
		t.Logf("the uninstall Job's log:\n%s", strings.Join(logs, "\n"))
		for _, err := range errs {
			t.Error(err)
		}
	}
}

// runJob runs the Job's command in the test, with a client that authenticates as its pod's
// ServiceAccount.
func runJob(ctx context.Context, c *testbed.Cluster, job *batchv1.Job, log func(string)) error {
	spec := job.Spec.Template.Spec
	args := spec.Containers[0].Args
	if len(args) == 0 || args[0] != "uninstall" {
		return fmt.Errorf("the Job runs %q, not palisade-controller uninstall", args)
	}
	o, err := uninstall.ParseFlags(args[1:])
	if err != nil {
		return err
	}
	tr, err := c.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, spec.ServiceAccountName, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	sa, err := client.New(&rest.Config{Host: c.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: c.Config.CAData}}, client.Options{})
	if err != nil {
		return err
	}
	o.Log = funcr.New(func(_, args string) { log(args) }, funcr.Options{})
	return uninstall.Run(ctx, sa, o)
}

// finishJob writes the status the Job controller would: complete, or failed.
func finishJob(ctx context.Context, c *testbed.Cluster, job *batchv1.Job, runErr error) error {
	now := metav1.Now()
	job.Status.StartTime = &now
	cond := func(typ batchv1.JobConditionType) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "Test", Message: fmt.Sprint(runErr)}
	}
	if runErr == nil {
		job.Status.CompletionTime, job.Status.Succeeded = &now, 1
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet), cond(batchv1.JobComplete)}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget), cond(batchv1.JobFailed)}
	}
	return c.Client.Status().Update(ctx, job)
}

// checkUninstalled: after helm uninstall, the nodes are free of Palisade's finalizer, the fenced
// one keeps its taint and NodeFence, the controller's run-time objects, its Deployment and the
// hook's Job and Roles are gone, another Lease stays.
func checkUninstalled(t *testing.T, ctx context.Context, c *testbed.Cluster) {
	t.Helper()
	for _, name := range []string{"worker-1", "worker-2"} {
		n := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(n.Finalizers, v1alpha1.FinalizerFenceOnDelete) {
			t.Errorf("node %s keeps Palisade's finalizer", name)
		}
		if name == "worker-1" && !fencing.OutOfService(n) {
			t.Errorf("the fenced node %s lost its out-of-service taint: %v", name, n.Spec.Taints)
		}
	}
	meta := func(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
	exists := map[client.Object]bool{
		&v1alpha1.NodeFence{ObjectMeta: meta("", "worker-1")}:                          true,
		&coordinationv1.Lease{ObjectMeta: meta(namespace, "other")}:                    true,
		&corev1.Secret{ObjectMeta: meta(namespace, "palisade-agent-ca")}:               false,
		&corev1.ConfigMap{ObjectMeta: meta(namespace, "palisade-agent-ca")}:            false,
		&coordinationv1.Lease{ObjectMeta: meta(namespace, app.LeaderElectionID)}:       false,
		&coordinationv1.Lease{ObjectMeta: meta(namespace, fencing.TokenLeaseName)}:     false,
		&coordinationv1.Lease{ObjectMeta: meta("kube-node-lease", sight.CanaryName)}:   false,
		&batchv1.Job{ObjectMeta: meta(namespace, "palisade-uninstall")}:                false,
		&rbacv1.Role{ObjectMeta: meta(namespace, "palisade-uninstall")}:                false,
		&rbacv1.RoleBinding{ObjectMeta: meta("kube-node-lease", "palisade-uninstall")}: false,
		&rbacv1.ClusterRole{ObjectMeta: meta("", "palisade")}:                          false,
	}
	for obj, want := range exists {
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if got := err == nil; got != want {
			t.Errorf("%T %s/%s exists: %v, want %v", obj, obj.GetNamespace(), obj.GetName(), got, want)
		}
	}
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods, client.InNamespace(namespace)); err != nil || len(pods.Items) != 0 {
		t.Errorf("%d pods left in %s (%v)", len(pods.Items), namespace, err)
	}
}
