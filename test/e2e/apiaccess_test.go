package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"palisade.dev/palisade/test/scenario"
)

// agentRules are what an agent does through the API server for orders: watch its NodeFence and
// answer in an annotation on it.
var agentRules = []rbacv1.PolicyRule{{APIGroups: []string{"fencing.palisade.dev"}, Resources: []string{"nodefences"}, Verbs: []string{"get", "list", "watch", "patch"}}}

// agentAPIArgs gives an agent the API server as a pod would have it: a ServiceAccount token
// (from the TokenRequest API) with the agent's RBAC, the API server's CA, and its address
// (server, e.g. a relay; "" for the API server's own). It returns the agent's flags.
func agentAPIArgs(t *testing.T, env *scenario.Env, server, tlsName string) []string {
	t.Helper()
	ctx := context.Background()
	kube := env.Cluster.Kube
	const ns, name = "palisade-system", "palisade-agent"
	_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: agentRules}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tok, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(token, []byte(tok.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, env.Cluster.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	if server == "" {
		server = env.Cluster.Config.Host
	}
	args := []string{"--api-server", server, "--api-token-file", token, "--api-ca-file", ca}
	if tlsName != "" {
		args = append(args, "--api-tls-server-name", tlsName)
	}
	return args
}
