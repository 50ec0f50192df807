package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// Who may fence: the chart's admission policies, installed with Helm into the real API server,
// let only the configured user, group and ServiceAccount set a fence request, by impersonation.
// Bob may patch Nodes (RBAC) but is not allowed to fence: his request is denied with a message
// that says who may, while his label on the same node passes. The requester recorded on the
// NodeFence is the authenticated user, whatever field manager or requested-by the client sent.
func TestFenceRequestAdmission(t *testing.T) {
	env := startScene(t, scenario.Options{})
	startController(t, env)
	installChart(t, env, map[string]any{"fenceRequests": map[string]any{
		"allowedUsers": []any{"alice"}, "allowedGroups": []any{"fencers"}, "allowedServiceAccounts": []any{"ops/fence-bot"},
	}})
	grantNodePatch(t, env)
	const bot = "system:serviceaccount:ops:fence-bot"
	alice, bob := as(t, env, "alice"), as(t, env, "bob")
	carol, fenceBot := as(t, env, "carol", "fencers"), as(t, env, bot, "system:serviceaccounts", "system:serviceaccounts:ops")
	n1, n2 := env.Node(1).Name(), env.Node(2).Name()
	request := map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: admission"}
	waitPoliciesInForce(t, bob, alice, n2)

	err := annotate(bob, n1, request, "bob-manager", false)
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Fatalf("bob's fence request: err %v, want a denial", err)
	}
	for _, want := range []string{"user bob may not set or change " + v1alpha1.AnnotationFenceRequest, "only users alice, groups fencers, ServiceAccounts ops/fence-bot may"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("denial %q does not say %q", err, want)
		}
	}
	if err := annotate(bob, n1, map[string]any{v1alpha1.AnnotationFenceRequestedBy: "alice"}, "bob-manager", false); err == nil {
		t.Error("bob set " + v1alpha1.AnnotationFenceRequestedBy + " on its own")
	}
	label, _ := jsonMarshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": "bob"}}})
	if err := bob.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n1}}, client.RawPatch(types.MergePatchType, label)); err != nil {
		t.Errorf("bob's label on the node was denied: %v", err)
	}

	// Nor may bob let a deletion skip its fence by taking Palisade's finalizer off.
	waitNode(t, env, n2, "to carry the finalizer", func(n *corev1.Node) bool {
		return slices.Contains(n.Finalizers, v1alpha1.FinalizerFenceOnDelete)
	})
	unfinalize, _ := jsonMarshal([]map[string]any{{"op": "test", "path": "/metadata/finalizers/0", "value": v1alpha1.FinalizerFenceOnDelete},
		{"op": "remove", "path": "/metadata/finalizers/0"}})
	err = bob.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n2}}, client.RawPatch(types.JSONPatchType, unfinalize))
	if err == nil || !strings.Contains(err.Error(), "may not remove the finalizer "+v1alpha1.FinalizerFenceOnDelete) {
		t.Errorf("bob removing the finalizer: err %v, want a denial naming it", err)
	}
	if err := carol.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n2}}, client.RawPatch(types.JSONPatchType, unfinalize), client.DryRunAll); err != nil {
		t.Errorf("carol (allowed to fence) may remove the finalizer by hand, but was denied: %v", err)
	}

	for who, c := range map[string]client.Client{"carol (group fencers)": carol, bot: fenceBot} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n2}}
		if err := annotateInto(c, n, request, "some-manager", true); err != nil {
			t.Errorf("%s may fence, but the dry-run request was denied: %v", who, err)
		}
	}

	// Alice fences node 1, under a forged field manager and a forged requested-by.
	forged := map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: alice fences node 1", v1alpha1.AnnotationFenceRequestedBy: "mallory"}
	if err := annotate(alice, n1, forged, "mallory-manager", false); err != nil {
		t.Fatalf("alice's fence request was denied: %v", err)
	}
	nf := waitFence(t, env.Cluster, n1, time.Minute, func(*v1alpha1.NodeFence) bool { return true })
	if nf.Spec.RequestedBy != "alice" || nf.Spec.Trigger != v1alpha1.TriggerManual {
		t.Errorf("NodeFence requestedBy %q trigger %s, want alice, Manual", nf.Spec.RequestedBy, nf.Spec.Trigger)
	}
	if err := annotate(alice, n1, map[string]any{v1alpha1.AnnotationFenceRequestedBy: "bob"}, "alice", false); err == nil {
		t.Error("alice re-attributed her request to bob")
	}
	node := &corev1.Node{}
	if err := env.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: n1}, node); err != nil {
		t.Fatal(err)
	}
	if got := node.Annotations[v1alpha1.AnnotationFenceRequestedBy]; got != "alice" {
		t.Errorf("%s = %q, want alice", v1alpha1.AnnotationFenceRequestedBy, got)
	}
	if err := env.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: n2}, &v1alpha1.NodeFence{}); !apierrors.IsNotFound(err) {
		t.Errorf("a dry-run request fenced node 2 (err %v)", err)
	}

	// A confirmation that a fenced node is clean gives it back: guarded the same way.
	unfence := map[string]any{v1alpha1.AnnotationUnfenceRequest: "e2e: reinstalled", v1alpha1.AnnotationUnfenceRequestedBy: "mallory"}
	err = annotate(bob, n1, unfence, "bob-manager", true)
	if err == nil || !strings.Contains(err.Error(), "user bob may not set or change "+v1alpha1.AnnotationUnfenceRequest) {
		t.Errorf("bob's unfence request: err %v, want a denial naming %s", err, v1alpha1.AnnotationUnfenceRequest)
	}
	if err := annotate(bob, n1, map[string]any{v1alpha1.AnnotationUnfenceRequestedBy: "alice"}, "bob-manager", true); err == nil {
		t.Error("bob set " + v1alpha1.AnnotationUnfenceRequestedBy + " on its own")
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n1}}
	if err := annotateInto(alice, n, unfence, "mallory-manager", true); err != nil {
		t.Fatalf("alice's unfence request was denied: %v", err)
	}
	if got := n.Annotations[v1alpha1.AnnotationUnfenceRequestedBy]; got != "alice" {
		t.Errorf("%s = %q after alice's request with a forged one, want alice", v1alpha1.AnnotationUnfenceRequestedBy, got)
	}
	if got := n.Annotations[v1alpha1.AnnotationFenceRequestedBy]; got != "alice" {
		t.Errorf("%s = %q after alice's unfence request, want alice's fence request's alice kept", v1alpha1.AnnotationFenceRequestedBy, got)
	}
}

// waitPoliciesInForce waits until the API server enforces the policies it has just been given:
// a dry-run request by a denied user is refused, and one by an allowed user comes back with the
// requester recorded.
func waitPoliciesInForce(t *testing.T, denied, allowed client.Client, node string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := annotate(denied, node, map[string]any{v1alpha1.AnnotationFenceRequest: "probe"}, "probe", true); err == nil {
			return false, nil
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := annotateInto(allowed, n, map[string]any{v1alpha1.AnnotationFenceRequest: "probe"}, "probe", true); err != nil {
			return false, nil
		}
		return n.Annotations[v1alpha1.AnnotationFenceRequestedBy] != "", nil
	})
	if err != nil {
		t.Fatalf("the chart's fence-request admission policies never came into force: %v", err)
	}
}

func annotate(c client.Client, node string, annotations map[string]any, manager string, dryRun bool) error {
	return annotateInto(c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, annotations, manager, dryRun)
}

// annotateInto merge-patches the node's annotations as the client's user under the given field
// manager; n receives the API server's answer.
func annotateInto(c client.Client, n *corev1.Node, annotations map[string]any, manager string, dryRun bool) error {
	patch, err := jsonMarshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	opts := []client.PatchOption{client.FieldOwner(manager)}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return c.Patch(context.Background(), n, client.RawPatch(types.MergePatchType, patch), opts...)
}

// as is a client that impersonates user in groups (and system:authenticated).
func as(t *testing.T, env *scenario.Env, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: env.Cluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// grantNodePatch lets alice, bob, the group fencers and the ServiceAccount ops/fence-bot read
// and patch Nodes: RBAC alone would let every one of them fence.
func grantNodePatch(t *testing.T, env *scenario.Env) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch", "update"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-editor"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"},
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "fencers"},
			{Kind: rbacv1.ServiceAccountKind, Namespace: "ops", Name: "fence-bot"},
		}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Cluster.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}
