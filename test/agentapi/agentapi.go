package agentapi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Namespace and Name are the agents' ServiceAccount.
const Namespace, Name = "palisade-system", "palisade-agent"

// Rules are what an agent does through the API server for orders, as the chart's
// ClusterRole lets it: watch its NodeFence and answer in an annotation on it, and list and
// watch the pods bound to its node, whose specs it keeps for the executor.
var Rules = []rbacv1.PolicyRule{
	{APIGroups: []string{"fencing.palisade.dev"}, Resources: []string{"nodefences"}, Verbs: []string{"get", "list", "watch", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
}

// Args gives agents the API server as a pod would have it: a token of the ServiceAccount
// Namespace/Name (from the TokenRequest API) with Rules, the API server's CA (caData), and its address
// server (e.g. a relay), whose certificate is checked for tlsName when not "". The files go
// to dir; it returns the agents' flags.
func Args(ctx context.Context, kube kubernetes.Interface, caData []byte, dir, server, tlsName string) ([]string, error) {
	const ns, name = Namespace, Name
	create := func(err error) error {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("giving the agents API access: %w", err)
		}
		return nil
	}
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err := create(err); err != nil {
		return nil, err
	}
	_, err = kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err := create(err); err != nil {
		return nil, err
	}
	_, err = kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: Rules}, metav1.CreateOptions{})
	if err := create(err); err != nil {
		return nil, err
	}
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	}, metav1.CreateOptions{})
	if err := create(err); err != nil {
		return nil, err
	}
	tok, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("giving the agents API access: %w", err)
	}
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "api-ca.crt")
	if err := os.WriteFile(token, []byte(tok.Status.Token), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(ca, caData, 0o600); err != nil {
		return nil, err
	}
	args := []string{"--api-server", server, "--api-token-file", token, "--api-ca-file", ca}
	if tlsName != "" {
		args = append(args, "--api-tls-server-name", tlsName)
	}
	return args, nil
}
