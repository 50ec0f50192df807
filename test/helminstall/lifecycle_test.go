package helminstall

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/realscene"
)

// waitRecovered waits until the installed release has powered the fenced machine back on
// (the policy's recovery.powerOn) and, the machine back and rebooted, unfenced it: the
// NodeFence Recovered, the out-of-service taint gone.
func waitRecovered(t *testing.T, ctx context.Context, s *realscene.Scene, node string, timeout time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var f v1alpha1.NodeFence
		if err := s.Cluster.Client.Get(ctx, client.ObjectKey{Name: node}, &f); err != nil {
			last = err.Error()
			return false, nil
		}
		var n corev1.Node
		if err := s.Cluster.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			last = err.Error()
			return false, nil
		}
		tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService })
		last = fmt.Sprintf("NodeFence %s, out-of-service taint %v, machine running %v", f.Status.Phase, tainted, s.Machine(node).Running())
		return f.Status.Phase == v1alpha1.PhaseRecovered && !tainted, nil
	})
	if err != nil {
		t.Fatalf("%s was not recovered within %s: %s", node, timeout, last)
	}
}

// upgrade upgrades the release to the chart as it is (the older one lacked a CRD printer
// column) with values of revision 2, and waits until revision 2 runs: new controller and agent
// pods, certified and heard.
func upgrade(t *testing.T, ctx context.Context, s *realscene.Scene, h *helm) {
	const crd = "nodefences.fencing.palisade.dev"
	if hasVerdictColumn(t, ctx, s, crd) {
		t.Fatalf("before the upgrade, %s already has the Verdict column: the older chart was not installed", crd)
	}
	begin := time.Now()
	if err := h.upgrade(ctx, loadChart(t), values("2")); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if !hasVerdictColumn(t, ctx, s, crd) {
		t.Errorf("helm upgrade did not upgrade the CRD %s: no Verdict column", crd)
	}
	waitRunning(t, ctx, s, "2", 4*time.Minute)
	t.Logf("upgraded: revision 2 runs (CRDs upgraded, pods replaced, agents certified and heard) %s after helm upgrade", time.Since(begin).Round(100*time.Millisecond))
}

func hasVerdictColumn(t *testing.T, ctx context.Context, s *realscene.Scene, name string) bool {
	t.Helper()
	crd, err := crds(t, s).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		for _, c := range v.AdditionalPrinterColumns {
			if c.Name == "Verdict" {
				return true
			}
		}
	}
	return false
}

// crds is the API server's CRD client.
func crds(t *testing.T, s *realscene.Scene) apiextensionsclient.CustomResourceDefinitionInterface {
	t.Helper()
	cs, err := apiextensions.NewForConfig(s.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs.ApiextensionsV1().CustomResourceDefinitions()
}

// uninstall uninstalls the release and checks that nothing of it is left: no pod, no object
// in its namespace but the test's own (the BMC Secret) and the ones every namespace has, no
// cluster-wide object of the release but its CRDs (kept on purpose, with their
// helm.sh/resource-policy), no Palisade finalizer or taint on a node, no agent CSR.
func uninstall(t *testing.T, ctx context.Context, s *realscene.Scene, h *helm) {
	begin := time.Now()
	if err := h.uninstall(); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	dyn, err := dynamic.NewForConfig(s.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = leftovers(ctx, s, dyn)
		return len(left) == 0, nil
	})
	if err != nil {
		fresh, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		t.Fatalf("helm uninstall left behind, %s later:\n  %s", time.Since(begin).Round(time.Second), strings.Join(leftovers(fresh, s, dyn), "\n  "))
	}
	for _, name := range []string{"fencingpolicies.fencing.palisade.dev", "nodefences.fencing.palisade.dev"} {
		crd, err := crds(t, s).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("the CRD %s, kept by default, is gone: %v", name, err)
		} else if crd.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("the CRD %s is left without helm.sh/resource-policy: keep", name)
		}
	}
	t.Logf("uninstalled: nothing left but the kept CRDs, %s after helm uninstall", time.Since(begin).Round(100*time.Millisecond))
}

// namespaced are the kinds checked in the release's namespace; want are the objects that
// belong there without the release.
var namespaced = []struct {
	gvr  schema.GroupVersionResource
	want []string
}{
	{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, nil},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, []string{"kube-root-ca.crt"}},
	{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, []string{"bmc-credentials"}},
	{schema.GroupVersionResource{Version: "v1", Resource: "services"}, nil},
	{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, []string{"default"}},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, nil},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, nil},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, nil},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "controllerrevisions"}, nil},
	{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, nil},
	{schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, nil},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, nil},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, nil},
	{schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}, nil},
	{schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}, nil},
}

// clusterWide are cluster-scoped kinds whose objects of the release carry its instance label.
var clusterWide = []schema.GroupVersionResource{
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
}

// leftovers lists what of the release is still there.
func leftovers(ctx context.Context, s *realscene.Scene, dyn dynamic.Interface) []string {
	var left []string
	add := func(what string, items []unstructured.Unstructured, want []string) {
		for _, o := range items {
			if !slices.Contains(want, o.GetName()) {
				left = append(left, what+" "+o.GetName())
			}
		}
	}
	for _, k := range namespaced {
		l, err := dyn.Resource(k.gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return []string{fmt.Sprintf("listing %s: %v", k.gvr.Resource, err)}
		}
		add(namespace+"/"+k.gvr.Resource, l.Items, k.want)
	}
	for _, gvr := range clusterWide {
		l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil {
			return []string{fmt.Sprintf("listing %s: %v", gvr.Resource, err)}
		}
		add(gvr.Resource, l.Items, nil)
	}
	csrs, err := s.Cluster.Kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing CSRs: " + err.Error()}
	}
	for _, c := range csrs.Items {
		if c.Spec.SignerName == agentSigner {
			left = append(left, "CSR "+c.Name+" of "+agentSigner)
		}
	}
	nodes, err := s.Cluster.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing nodes: " + err.Error()}
	}
	for _, n := range nodes.Items {
		for _, f := range n.Finalizers {
			if strings.Contains(f, "palisade.dev") {
				left = append(left, "finalizer "+f+" on node "+n.Name)
			}
		}
		for _, tn := range n.Spec.Taints {
			if tn.Key == corev1.TaintNodeOutOfService {
				left = append(left, "out-of-service taint on node "+n.Name)
			}
		}
		if _, ok := n.Annotations[v1alpha1.AnnotationAgent]; ok {
			left = append(left, "annotation "+v1alpha1.AnnotationAgent+" on node "+n.Name)
		}
	}
	return left
}
