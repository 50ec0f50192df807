package uninstall_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	"palisade.dev/palisade/cmd/palisade-controller/uninstall"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/sight"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/providers/agent/pki/pkitest"
	"palisade.dev/palisade/test/testbed"
)

const (
	ns         = "palisade-system"
	caName     = "palisade-agent-ca"
	otherFinal = "example.com/keep"
)

var (
	controllerLabels = map[string]string{"app.kubernetes.io/name": "palisade", "app.kubernetes.io/component": "controller"}
	outOfService     = corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}
)

// TestUninstall runs the cleanup twice against the real API server, with the real Deployment
// and ReplicaSet controllers running the controller's two (never scheduled) pods: the first
// run stops the controller, removes Palisade's finalizer from every node (a node being deleted
// goes) and deletes the agents' CA Secret and ConfigMap and the three Leases; the fenced node
// keeps its out-of-service taint and its NodeFence, other finalizers and objects stay, and
// the log says what was done and which node stays fenced. The second run finds it all done.
func TestUninstall(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, Controllers: []string{"deployment-controller", "replicaset-controller"}})
	ctx := t.Context()
	setUp(t, ctx, c)
	o := uninstall.Options{Namespace: ns, Deployment: "palisade", StopTimeout: 30 * time.Second,
		LeaderElectionNamespace: ns, AgentCASecret: caName, AgentCAConfigMap: caName, AgentSigner: pki.SignerName}
	want := state{
		Replicas: 0,
		Nodes: map[string]string{
			"worker-1": "finalizers [] taints [node.kubernetes.io/out-of-service] annotations []",
			"worker-2": "finalizers [example.com/keep] taints [] annotations []",
			"worker-3": "finalizers [] taints [] annotations []",
			"worker-5": "finalizers [] taints [] annotations [example.com/keep]",
		},
		Objects: map[string]bool{
			"ConfigMap palisade-system/palisade-agent-ca":                       false,
			"Lease kube-node-lease/palisade-sight.fencing.palisade.dev":         false,
			"Lease kube-node-lease/worker-1":                                    true,
			"Lease palisade-system/other":                                       true,
			"Lease palisade-system/palisade-controller.fencing.palisade.dev":    false,
			"Lease palisade-system/palisade-fencing-token.fencing.palisade.dev": false,
			"NodeFence /worker-1":                                               true,
			"CertificateSigningRequest /agent-worker-1":                         false,
			"CertificateSigningRequest /agent-worker-2":                         false,
			"CertificateSigningRequest /other-signer":                           true,
			"Secret palisade-system/bmc-credentials":                            true,
			"Secret palisade-system/palisade-agent-ca":                          false,
		},
	}
	wantLogs := [][]string{{
		`"msg"="scaled the controller to 0 replicas`, `"msg"="the controller is stopped"`,
		`"msg"="node stays fenced`, `"Node"={"name"="worker-1"}`,
		`"msg"="removed Palisade's finalizer" "Node"={"name"="worker-4"} "finalizer"="palisade.dev/fence-on-delete" "deleting"=true`,
		`"msg"="removed Palisade's annotation" "Node"={"name"="worker-5"} "annotation"="palisade.dev/agent"`,
		`"msg"="removed Palisade's annotation" "Node"={"name"="worker-2"} "annotation"="palisade.dev/agent"`,
		`"msg"="nodes released from Palisade's finalizer" "released"=3 "stayFenced"=1`,
		`"msg"="deleted" "Secret"={"name"="palisade-agent-ca" "namespace"="palisade-system"}`,
		`"msg"="deleted" "Lease"={"name"="palisade-sight.fencing.palisade.dev" "namespace"="kube-node-lease"}`,
		`"msg"="deleted the agents' CertificateSigningRequests" "signer"="palisade.dev/agent" "deleted"=2`,
	}, {
		`"msg"="the controller is stopped"`,
		`"msg"="nodes released from Palisade's finalizer" "released"=0 "stayFenced"=1`,
		`"msg"="already gone" "ConfigMap"={"name"="palisade-agent-ca" "namespace"="palisade-system"}`,
		`"msg"="deleted the agents' CertificateSigningRequests" "signer"="palisade.dev/agent" "deleted"=0`,
	}}
	for run, wantLog := range wantLogs {
		var logs []string
		o.Log = funcr.New(func(_, args string) { logs = append(logs, args) }, funcr.Options{})
		if err := uninstall.Run(ctx, c.Client, o); err != nil {
			t.Fatalf("run %d: %v", run+1, err)
		}
		if diff := cmp.Diff(want, observe(t, ctx, c)); diff != "" {
			t.Errorf("run %d: state (-want +got):\n%s", run+1, diff)
		}
		all := strings.Join(logs, "\n")
		for _, w := range wantLog {
			if !strings.Contains(all, w) {
				t.Errorf("run %d: the log lacks %s:\n%s", run+1, w, all)
			}
		}
		if (run > 0 && strings.Contains(all, `"msg"="deleted"`)) || strings.Contains(all, "worker-3") {
			t.Errorf("run %d: the log says it deleted something again or names an untouched node:\n%s", run+1, all)
		}
	}
}

// setUp creates what the controller leaves at run time and what is not its own.
func setUp(t *testing.T, ctx context.Context, c *testbed.Cluster) {
	t.Helper()
	pal := []string{v1alpha1.FinalizerFenceOnDelete}
	meta := func(namespace, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: name}
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: meta("", ns)},
		controllerDeployment(),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Finalizers: pal}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{outOfService}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-2", Finalizers: []string{otherFinal, v1alpha1.FinalizerFenceOnDelete},
			Annotations: map[string]string{v1alpha1.AnnotationAgent: "2026-12-01T00:00:00Z"}}},
		&corev1.Node{ObjectMeta: meta("", "worker-3")},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-5", Annotations: map[string]string{v1alpha1.AnnotationAgent: "2026-12-01T00:00:00Z", "example.com/keep": "yes"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-4", Finalizers: pal}},
		&corev1.Secret{ObjectMeta: meta(ns, caName)},
		&corev1.ConfigMap{ObjectMeta: meta(ns, caName)},
		&coordinationv1.Lease{ObjectMeta: meta(ns, app.LeaderElectionID)},
		&coordinationv1.Lease{ObjectMeta: meta(ns, fencing.TokenLeaseName)},
		&coordinationv1.Lease{ObjectMeta: meta("kube-node-lease", sight.CanaryName)},
		&corev1.Secret{ObjectMeta: meta(ns, "bmc-credentials")},
		&coordinationv1.Lease{ObjectMeta: meta(ns, "other")},
		&coordinationv1.Lease{ObjectMeta: meta("kube-node-lease", "worker-1")},
		pkitest.CSR(t, metav1.ObjectMeta{Name: "agent-worker-1"}, "worker-1", pki.SignerName),
		pkitest.CSR(t, metav1.ObjectMeta{Name: "agent-worker-2"}, "worker-2", pki.SignerName),
		pkitest.CSR(t, metav1.ObjectMeta{Name: "other-signer"}, "worker-1", "example.com/other"),
		&v1alpha1.NodeFence{ObjectMeta: meta("", "worker-1"), Spec: v1alpha1.NodeFenceSpec{NodeName: "worker-1", Trigger: v1alpha1.TriggerManual,
			Methods: []v1alpha1.Method{{Name: "m", Type: v1alpha1.MethodExecutor}}}},
	}
	for _, obj := range objs {
		if err := c.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
	// A node being deleted waits on Palisade's finalizer.
	if err := c.Client.Delete(ctx, &corev1.Node{ObjectMeta: meta("", "worker-4")}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); len(controllerPods(t, ctx, c)) < 2; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the controller's Deployment has no 2 pods after 30s")
		}
	}
}

// controllerDeployment stands in for the chart's: 2 replicas whose pods are never scheduled.
func controllerDeployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "palisade"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: controllerLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: controllerLabels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"palisade.dev/test": "nowhere"},
					Containers:   []corev1.Container{{Name: "controller", Image: "palisade-controller"}},
				},
			},
		},
	}
}

func controllerPods(t *testing.T, ctx context.Context, c *testbed.Cluster) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(controllerLabels)); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// state is what the test asserts: the controller's replicas and pods, every node's
// finalizers, taints and annotations, and whether each object exists.
type state struct {
	Replicas int32
	Pods     int
	Nodes    map[string]string
	Objects  map[string]bool
}

func observe(t *testing.T, ctx context.Context, c *testbed.Cluster) state {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "palisade"}, d); err != nil {
		t.Fatal(err)
	}
	s := state{Replicas: *d.Spec.Replicas, Pods: len(controllerPods(t, ctx, c)), Nodes: map[string]string{}, Objects: map[string]bool{}}
	nodes := &corev1.NodeList{}
	if err := c.Client.List(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		var taints []string
		for _, tn := range n.Spec.Taints {
			if tn.Key != corev1.TaintNodeNotReady { // the API server's, on every new node
				taints = append(taints, tn.Key)
			}
		}
		annotations := slices.Sorted(maps.Keys(n.Annotations))
		s.Nodes[n.Name] = fmt.Sprintf("finalizers %v taints %v annotations %v", n.Finalizers, taints, annotations)
	}
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: caName}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: caName}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app.LeaderElectionID}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fencing.TokenLeaseName}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: sight.CanaryName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc-credentials"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "worker-1"}},
		&v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}},
		&certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "agent-worker-1"}},
		&certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "agent-worker-2"}},
		&certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "other-signer"}},
	} {
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		gvk, _ := c.Client.GroupVersionKindFor(obj)
		s.Objects[gvk.Kind+" "+obj.GetNamespace()+"/"+obj.GetName()] = err == nil
	}
	return s
}

// TestParseFlags: the hook's arguments, and the refusals.
func TestParseFlags(t *testing.T) {
	o, err := uninstall.ParseFlags([]string{"--namespace=palisade-system", "--deployment=palisade", "--stop-timeout=90s",
		"--leader-election-namespace=le", "--agent-ca-secret=ca", "--agent-ca-configmap=bundle", "--agent-signer=palisade.dev/agent"})
	want := uninstall.Options{Namespace: ns, Deployment: "palisade", StopTimeout: 90 * time.Second, LeaderElectionNamespace: "le", AgentCASecret: "ca", AgentCAConfigMap: "bundle",
		AgentSigner: pki.SignerName}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, o, cmpopts.IgnoreFields(uninstall.Options{}, "Log")); diff != "" {
		t.Errorf("ParseFlags (-want +got):\n%s", diff)
	}
	t.Setenv("POD_NAMESPACE", "")
	for _, args := range [][]string{{}, {"--namespace=x", "extra"}, {"--namespce=x"}} {
		if _, err := uninstall.ParseFlags(args); err == nil {
			t.Errorf("ParseFlags(%q) succeeds, want an error", args)
		}
	}
}
