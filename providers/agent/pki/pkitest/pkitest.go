// Package pkitest sets up, on a real API server, what an agent's certificate request needs: the
// agents' ServiceAccount with the RBAC an agent uses, Nodes, and pods bound to them whose
// ServiceAccount tokens (TokenRequest, bound to the pod) carry the node name, as a DaemonSet
// pod's projected token does.
package pkitest

import (
	"context"
	"fmt"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// Agents is the agents' ServiceAccount on an API server.
type Agents struct {
	Kube            kubernetes.Interface // admin
	Config          *rest.Config         // admin; its host and CA are used for the tokens' configs
	Namespace, Name string
}

// Setup creates the namespace, the ServiceAccount, and a ClusterRole and binding that let it
// create, get and watch CSRs and read ConfigMaps in its namespace (what the agent does).
func Setup(t testing.TB, kube kubernetes.Interface, cfg *rest.Config, namespace, name string) *Agents {
	t.Helper()
	ctx := context.Background()
	a := &Agents{Kube: kube, Config: cfg, Namespace: namespace, Name: name}
	must(t, ignoreExists(kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})))
	must(t, ignoreExists(kube.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})))
	role := "pkitest-" + namespace + "-" + name
	must(t, ignoreExists(kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"create", "get", "watch"}}},
	}, metav1.CreateOptions{})))
	must(t, ignoreExists(kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: namespace, Name: name}},
	}, metav1.CreateOptions{})))
	must(t, ignoreExists(kube.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})))
	must(t, ignoreExists(kube.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: namespace, Name: name}},
	}, metav1.CreateOptions{})))
	return a
}

// PodToken creates the Node node (unless it exists) and a pod of the ServiceAccount bound to
// it (the pod need not run), and returns a token bound to that pod.
func (a *Agents) PodToken(t testing.TB, node string) string {
	t.Helper()
	ctx := context.Background()
	must(t, ignoreExists(a.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})))
	pod, err := a.Kube.CoreV1().Pods(a.Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-" + node + "-"},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: a.Name, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "agent", Image: "palisade-agent"}},
		},
	}, metav1.CreateOptions{})
	must(t, err)
	return a.token(t, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
}

// UnboundToken returns a token of the ServiceAccount bound to no object (no node name).
func (a *Agents) UnboundToken(t testing.TB) string {
	t.Helper()
	return a.token(t, nil)
}

func (a *Agents) token(t testing.TB, ref *authenticationv1.BoundObjectReference) string {
	t.Helper()
	tr, err := a.Kube.CoreV1().ServiceAccounts(a.Namespace).CreateToken(context.Background(), a.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: ref, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", a.Namespace, a.Name, err)
	}
	return tr.Status.Token
}

// Client is a clientset that authenticates with token (and trusts the API server's CA only).
func (a *Agents) Client(t testing.TB, token string) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: a.Config.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: a.Config.CAData}}
	c, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	return c
}

func ignoreExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(fmt.Errorf("setting up the agents' ServiceAccount: %w", err))
	}
}
