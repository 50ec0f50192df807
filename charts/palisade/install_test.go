package palisade_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"palisade.dev/palisade/providers/agent/pki"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/attach"
	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/providers/agent/pki/pkitest"
	"palisade.dev/palisade/providers/agent/pki/signer"
	"palisade.dev/palisade/test/helmtest"
	"palisade.dev/palisade/test/testbed"
)

// installChart installs the chart with the Helm SDK, as the admin, into namespace (created
// first), without its CRDs (crds.enabled=false: the test bed installed them, and Helm does not
// take over objects it did not create).
func installChart(t *testing.T, c *testbed.Cluster, vals map[string]any) {
	t.Helper()
	all := map[string]any{"crds": map[string]any{"enabled": false}}
	maps.Copy(all, vals)
	install := action.NewInstall(helmConfig(t, c))
	install.ReleaseName, install.Namespace = "palisade", namespace
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := install.RunWithContext(ctx, loadChart(t), all); err != nil {
		t.Fatalf("helm install: %v", err)
	}
}

// helmConfig creates namespace and returns Helm's configuration for it, as the admin.
func helmConfig(t *testing.T, c *testbed.Cluster) *action.Configuration {
	t.Helper()
	if _, err := c.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return helmtest.Configuration(t, c, namespace)
}

// access is one SubjectAccessReview question and its expected answer.
type access struct {
	verb, group, resource, subresource, name, ns string
	allowed                                      bool
}

func checkAccess(t *testing.T, kube kubernetes.Interface, sa string, want []access) {
	t.Helper()
	for _, a := range want {
		r, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   signer.ServiceAccountUser(namespace, sa),
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource,
				Subresource: a.subresource, Name: a.name, Namespace: a.ns},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != a.allowed {
			t.Errorf("%s may %s %s/%s %s (name %q, namespace %q): %v, want %v (%s)", sa, a.verb, a.resource, a.subresource, a.group, a.name, a.ns, r.Status.Allowed, a.allowed, r.Status.Reason)
		}
	}
}

// TestChartRBACOnAPIServer installs the chart into the real API server and checks that its
// ServiceAccounts may do what the code does and no more: the agent sends and watches its CSR,
// reads the CA bundle and lists and watches pods (read-only), but approves nothing; the controller keeps the CA Secret, publishes the
// bundle, labels its pod, approves and signs palisade.dev/agent CSRs, and no other signer's.
// Beside the access reviews, the real calls run with each ServiceAccount's token.
func TestChartRBACOnAPIServer(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, Controllers: []string{"serviceaccount-token-controller"}})
	installChart(t, c, nil)
	const csrs, signers = "certificatesigningrequests", "signers"
	const cg = "certificates.k8s.io"
	checkAccess(t, c.Kube, "palisade-agent", []access{
		{verb: "create", group: cg, resource: csrs, allowed: true},
		{verb: "get", group: cg, resource: csrs, name: "x", allowed: true},
		{verb: "watch", group: cg, resource: csrs, allowed: true},
		{verb: "get", resource: "configmaps", ns: namespace, name: "palisade-agent-ca", allowed: true},
		{verb: "watch", group: "fencing.palisade.dev", resource: "nodefences", allowed: true},
		{verb: "patch", group: "fencing.palisade.dev", resource: "nodefences", name: "x", allowed: true},
		{verb: "delete", group: "fencing.palisade.dev", resource: "nodefences", name: "x"},
		{verb: "list", resource: "pods", allowed: true},
		{verb: "watch", resource: "pods", allowed: true},
		{verb: "get", resource: "pods", ns: "default", name: "x", allowed: true},
		{verb: "delete", resource: "pods", ns: "default", name: "x"},
		{verb: "patch", resource: "pods", ns: "default", name: "x"},
		{verb: "create", resource: "pods", subresource: "eviction", ns: "default", name: "x"},
		{verb: "update", group: cg, resource: csrs, subresource: "approval", name: "x"},
		{verb: "update", group: cg, resource: csrs, subresource: "status", name: "x"},
		{verb: "approve", group: cg, resource: signers, name: signer.SignerName},
		{verb: "sign", group: cg, resource: signers, name: signer.SignerName},
		{verb: "get", resource: "configmaps", ns: namespace, name: "other"},
		{verb: "get", resource: "secrets", ns: namespace, name: "palisade-agent-ca"},
	})
	checkAccess(t, c.Kube, "palisade", []access{
		{verb: "list", group: cg, resource: csrs, allowed: true},
		{verb: "watch", group: cg, resource: csrs, allowed: true},
		{verb: "update", group: cg, resource: csrs, subresource: "approval", name: "x", allowed: true},
		{verb: "update", group: cg, resource: csrs, subresource: "status", name: "x", allowed: true},
		{verb: "approve", group: cg, resource: signers, name: signer.SignerName, allowed: true},
		{verb: "sign", group: cg, resource: signers, name: signer.SignerName, allowed: true},
		{verb: "approve", group: cg, resource: signers, name: "kubernetes.io/kube-apiserver-client"},
		{verb: "sign", group: cg, resource: signers, name: "kubernetes.io/kube-apiserver-client"},
		{verb: "approve", group: cg, resource: signers, name: "palisade.dev/*"},
		{verb: "patch", resource: "pods", ns: namespace, name: "palisade-0", allowed: true},
		{verb: "patch", resource: "pods", ns: "default", name: "x"},
		{verb: "get", resource: "persistentvolumes", name: "x", allowed: true}, // the release's volumes (attach.Releaser.Releasing)
		{verb: "list", resource: "persistentvolumes"},
		{verb: "delete", resource: "persistentvolumes", name: "x"},
		{verb: "get", resource: "secrets", ns: namespace, name: "palisade-agent-ca", allowed: true},
		{verb: "create", resource: "secrets", ns: namespace, allowed: true},
		{verb: "update", resource: "secrets", ns: namespace, name: "palisade-agent-ca"},
		{verb: "delete", resource: "secrets", ns: namespace, name: "palisade-agent-ca"},
		{verb: "list", resource: "secrets", ns: namespace},
		{verb: "update", resource: "configmaps", ns: namespace, name: "palisade-agent-ca", allowed: true},
		{verb: "update", resource: "configmaps", ns: namespace, name: "other"},
		{verb: "get", group: "coordination.k8s.io", resource: "leases", ns: namespace, name: fencing.TokenLeaseName, allowed: true},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", ns: namespace, name: fencing.TokenLeaseName, allowed: true},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", ns: namespace, allowed: true},
		{verb: "delete", group: "coordination.k8s.io", resource: "leases", ns: namespace, name: fencing.TokenLeaseName},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", ns: "default", name: fencing.TokenLeaseName},
	})
	t.Run("real calls", func(t *testing.T) { chartRealCalls(t, c) })
	t.Run("agent answers only on its own NodeFence", func(t *testing.T) { agentAnswers(t, c) })
	t.Run("a node may not change its fence target", func(t *testing.T) { nodeTargets(t, c) })
}

// nodeTargets: a node's own credentials (group system:nodes, here by impersonation, with RBAC
// to patch nodes as the Node authorizer would give its kubelet) may change its Node, but not
// the annotations that name its fence's target: a node that could would point its own fence at
// a machine that is off already. An administrator may.
func nodeTargets(t *testing.T, c *testbed.Cluster) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-t", Annotations: map[string]string{v1alpha1.AnnotationBMCAddress: "10.0.0.5"}}}
	if err := c.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-nodes-patch-nodes"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, Verbs: []string{"get", "patch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-nodes-patch-nodes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "system:nodes"}}}
	for _, o := range []client.Object{role, binding} {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:node-t", Groups: []string{"system:nodes", "system:authenticated"}}
	kubelet, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	annotate := func(cl client.Client, key, value string, opts ...client.PatchOption) error {
		v := `"` + value + `"`
		if value == "" {
			v = "null"
		}
		return cl.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-t"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+key+`":`+v+`}}}`)), opts...)
	}
	// The API server loads a new admission policy a moment after it is created, and RBAC a
	// binding: wait until a dry run of a forbidden change is refused by the policy.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := annotate(kubelet, v1alpha1.AnnotationBMCAddress, "10.0.0.9", client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "fence target"), nil
	})
	if err != nil {
		t.Fatalf("the chart's admission policy never refused a node's own change of its BMC address: %v", err)
	}
	if err := annotate(kubelet, "example.com/other", "x"); err != nil {
		t.Errorf("the node changing another annotation of its own: %v", err)
	}
	// Through the status subresource too, which keeps a metadata change (nodes/status resets
	// only the spec): the kubelet's own way of writing its Node.
	status := `{"metadata":{"annotations":{"` + v1alpha1.AnnotationBMCAddress + `":"10.0.0.9"}}}`
	if err := kubelet.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-t"}}, client.RawPatch(types.MergePatchType, []byte(status))); err == nil || !strings.Contains(err.Error(), "fence target") {
		t.Errorf("the node pointing its BMC elsewhere through nodes/status: %v; want a refusal naming the fence target", err)
	}
	// Nor may it ask for its own unfencing that way (nodes/status was not matched before).
	unfence := `{"metadata":{"annotations":{"` + v1alpha1.AnnotationUnfenceRequest + `":"clean"}}}`
	if err := kubelet.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-t"}}, client.RawPatch(types.MergePatchType, []byte(unfence))); err == nil || !strings.Contains(err.Error(), "may not set or change palisade.dev/unfence-request") {
		t.Errorf("the node asking for its own unfencing through nodes/status: %v; want a refusal", err)
	}
	for _, tc := range []struct{ what, key, value string }{
		{"pointing its BMC elsewhere", v1alpha1.AnnotationBMCAddress, "10.0.0.9"},
		{"removing its BMC address", v1alpha1.AnnotationBMCAddress, ""},
		{"naming a BMC Secret", v1alpha1.AnnotationBMCSecret, "other-bmc"},
		{"naming a Redfish system", v1alpha1.AnnotationRedfishSystem, "blade-2"},
		{"turning its BMC's identity check off", v1alpha1.AnnotationBMCIdentityCheck, "false"},
		{"setting its storage addresses", v1alpha1.AnnotationStorageCIDRs, "10.9.9.9/32"},
	} {
		if err := annotate(kubelet, tc.key, tc.value); err == nil || !strings.Contains(err.Error(), "fence target") {
			t.Errorf("the node %s: %v; want a refusal naming the fence target", tc.what, err)
		}
	}
	// A fence request made of the node (by an administrator): the node may not withdraw it,
	// through the Node or its status; an administrator may.
	if err := annotate(c.Client, v1alpha1.AnnotationFenceRequest, "disk errors, suspected split brain"); err != nil {
		t.Fatalf("an administrator requesting a fence: %v", err)
	}
	for what, anns := range map[string]string{
		"the request":                 `"` + v1alpha1.AnnotationFenceRequest + `":null`,
		"the request and who made it": `"` + v1alpha1.AnnotationFenceRequest + `":null,"` + v1alpha1.AnnotationFenceRequestedBy + `":null`,
		"who made it":                 `"` + v1alpha1.AnnotationFenceRequestedBy + `":null`,
	} {
		withdraw := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{`+anns+`}}}`))
		if err := kubelet.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-t"}}, withdraw); err == nil || !strings.Contains(err.Error(), "may not withdraw a fence request") {
			t.Errorf("the node removing %s: %v; want a refusal", what, err)
		}
		if err := kubelet.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-t"}}, withdraw); err == nil || !strings.Contains(err.Error(), "may not withdraw a fence request") {
			t.Errorf("the node removing %s through nodes/status: %v; want a refusal", what, err)
		}
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "node-t"}, node); err != nil || node.Annotations[v1alpha1.AnnotationFenceRequest] == "" {
		t.Errorf("node-t's fence request %q (%v), want it kept", node.Annotations[v1alpha1.AnnotationFenceRequest], err)
	}
	if err := c.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-t"}}, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AnnotationFenceRequest+`":null,"`+v1alpha1.AnnotationFenceRequestedBy+`":null}}}`))); err != nil {
		t.Errorf("an administrator withdrawing the fence request: %v", err)
	}
	if err := annotate(c.Client, v1alpha1.AnnotationBMCAddress, "10.0.0.6"); err != nil {
		t.Errorf("an administrator changing the BMC address: %v", err)
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "node-t"}, node); err != nil || node.Annotations[v1alpha1.AnnotationBMCAddress] != "10.0.0.6" {
		t.Errorf("node-t's BMC address %q (%v), want the administrator's 10.0.0.6", node.Annotations[v1alpha1.AnnotationBMCAddress], err)
	}
}

// agentAnswers: the agent's RBAC allows patching NodeFences, and the chart's admission policy
// narrows it to the executor-status annotation of the NodeFence of the agent's own node.
func agentAnswers(t *testing.T, c *testbed.Cluster) {
	ctx := context.Background()
	for _, node := range []string{"node-a", "node-b"} {
		nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{v1alpha1.AnnotationExecutorCommand: `{"id":"x","action":"Terminate"}`}},
			Spec: v1alpha1.NodeFenceSpec{NodeName: node, Trigger: v1alpha1.TriggerManual, Methods: []v1alpha1.Method{{Name: "m", Type: v1alpha1.MethodExecutor}}}}
		if err := c.Client.Create(ctx, nf); err != nil {
			t.Fatal(err)
		}
	}
	agents := &pkitest.Agents{Kube: c.Kube, Config: c.Config, Namespace: namespace, Name: "palisade-agent"}
	cfg := &rest.Config{Host: c.Config.Host, BearerToken: agents.PodToken(t, "node-a"), TLSClientConfig: rest.TLSClientConfig{CAData: c.Config.CAData}}
	ag, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	patch := func(node, body string) error {
		nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: node}}
		return ag.Patch(ctx, nf, client.RawPatch(types.MergePatchType, []byte(body)))
	}
	answer := `{"metadata":{"annotations":{"` + v1alpha1.AnnotationExecutorStatus + `":"{}"}}}`
	// The API server loads a new admission policy a moment after it is created: wait until it
	// refuses a dry run of a forbidden answer.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
		return ag.Patch(ctx, nf, client.RawPatch(types.MergePatchType, []byte(answer)), client.DryRunAll) != nil, nil
	})
	if err != nil {
		t.Fatalf("the chart's admission policy never took effect: %v", err)
	}
	if err := patch("node-a", answer); err != nil {
		t.Errorf("the agent of node-a answering on its NodeFence: %v", err)
	}
	for _, tc := range []struct{ what, node, body, msg string }{
		{"answering on another node's NodeFence", "node-b", answer, "its own node"},
		{"changing the order", "node-a", `{"metadata":{"annotations":{"` + v1alpha1.AnnotationExecutorCommand + `":"{}"}}}`, "only the palisade.dev/executor-status annotation"},
		{"adding an annotation", "node-a", `{"metadata":{"annotations":{"x":"y"}}}`, "only the palisade.dev/executor-status annotation"},
		{"changing the spec", "node-a", `{"spec":{"dryRun":true}}`, "spec"},
		{"adding a label", "node-a", `{"metadata":{"labels":{"l":"v"}}}`, "labels or finalizers"},
	} {
		err := patch(tc.node, tc.body)
		if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("the agent of node-a %s: %v; want a refusal saying %q", tc.what, err, tc.msg)
		}
	}
	var nf v1alpha1.NodeFence
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "node-a"}, &nf); err != nil || nf.Spec.DryRun || nf.Annotations["x"] != "" {
		t.Errorf("node-a's NodeFence changed by a refused patch: %+v (%v)", nf.ObjectMeta.Annotations, err)
	}
}

func chartRealCalls(t *testing.T, c *testbed.Cluster) {
	ctx := context.Background()
	tr, err := c.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, "palisade", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctlCfg := &rest.Config{Host: c.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: c.Config.CAData}}
	ctl, err := client.New(ctlCfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctlKube := kubernetes.NewForConfigOrDie(ctlCfg)

	// The controller's start: the CA Secret (created, then read back), the bundle published
	// (created, then updated), its pod's label removed.
	caKey := types.NamespacedName{Namespace: namespace, Name: "palisade-agent-ca"}
	ca, err := signer.EnsureCA(ctx, ctl, caKey)
	if err == nil {
		_, err = signer.EnsureCA(ctx, ctl, caKey)
	}
	if err != nil {
		t.Fatalf("the controller keeping its CA: %v", err)
	}
	other, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	for _, bundle := range []*pki.CA{other, ca} {
		if err := signer.PublishBundle(ctx, ctl, caKey, bundle); err != nil {
			t.Fatalf("the controller publishing the CA bundle: %v", err)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "palisade-0", Labels: map[string]string{app.LabelAgentEndpoint: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "palisade-controller"}}}}
	if err := c.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+app.LabelAgentEndpoint+`":null}}}`))
	if err := ctl.Patch(ctx, pod, patch); err != nil {
		t.Errorf("the controller removing the label of its pod: %v", err)
	}

	// Fencing tokens: the controller creates the counter, then advances it.
	tokens := &fencing.Tokens{Reader: ctl, Writer: ctl, Lease: types.NamespacedName{Namespace: namespace, Name: fencing.TokenLeaseName}}
	for want := int64(1); want <= 2; want++ {
		if got, err := tokens.Next(ctx); err != nil || got != want {
			t.Errorf("the controller drawing fencing token %d: %d, %v", want, got, err)
		}
	}

	// The release reads a node's attachments, its pods and each attachment's PersistentVolume
	// (the volumes AWS forceDetachVolumes detaches).
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "chart-pv"}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-0abc"}}}}
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "chart-va"}, Spec: storagev1.VolumeAttachmentSpec{Attacher: "ebs.csi.aws.com", NodeName: "node-a",
		Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv.Name}}}
	for _, o := range []client.Object{pv, va} {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	rel := &attach.Releaser{Reader: ctl, Writer: ctl}
	if vols, _, err := rel.Releasing(ctx, "node-a", time.Time{}); err != nil || len(vols) != 1 || vols[0].Handle != "vol-0abc" {
		t.Errorf("the controller reading the volumes of node-a's attachments: %+v, %v; want vol-0abc", vols, err)
	}

	// The agent: reads the bundle, sends its CSR, cannot approve it; the controller signs it.
	agents := &pkitest.Agents{Kube: c.Kube, Config: c.Config, Namespace: namespace, Name: "palisade-agent"}
	agentKube := agents.Client(t, agents.PodToken(t, "node-a"))
	if _, err := agentKube.CoreV1().ConfigMaps(namespace).Get(ctx, caKey.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the agent reading the CA bundle: %v", err)
	}
	csr, err := agentKube.CertificatesV1().CertificateSigningRequests().Create(ctx, agentCSR(t, "node-a", signer.SignerName), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the agent sending its CSR: %v", err)
	}
	approve(csr)
	if _, err := agentKube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent approving its own CSR: %v, want Forbidden", err)
	}
	signer := &signer.Signer{Client: ctl, CA: ca, AgentUser: signer.ServiceAccountUser(namespace, "palisade-agent"), Now: time.Now}
	if _, err := signer.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: csr.Name}}); err != nil {
		t.Fatalf("the controller signing the agent's CSR: %v", err)
	}
	got, err := agentKube.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
	if err != nil || len(got.Status.Certificate) == 0 {
		t.Fatalf("the agent getting its certificate: %v, status %+v", err, got.Status)
	}

	// Another signer's CSR: the controller may not approve it.
	foreign, err := c.Kube.CertificatesV1().CertificateSigningRequests().Create(ctx, agentCSR(t, "node-a", "kubernetes.io/kube-apiserver-client"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approve(foreign)
	if _, err := ctlKube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, foreign.Name, foreign, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the controller approving a kube-apiserver-client CSR: %v, want Forbidden", err)
	}
}

func agentCSR(t *testing.T, node, signer string) *certificatesv1.CertificateSigningRequest {
	return pkitest.CSR(t, metav1.ObjectMeta{GenerateName: "chart-"}, node, signer)
}

func approve(csr *certificatesv1.CertificateSigningRequest) {
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", Message: "test"})
}
