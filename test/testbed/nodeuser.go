package testbed

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// nodesBinding binds the group system:nodes to the bootstrap ClusterRole system:node, which
// the API server has but no longer binds (clusters authorize kubelets with the Node
// authorizer, which the test bed's RBAC-only API server does not run).
const nodesBinding = "palisade-testbed:system:nodes"

// NodeKubeconfig provisions the kubelet credentials of node — a client certificate for user
// system:node:<node> in group system:nodes, the identity a kubelet has after TLS
// bootstrapping — and writes a kubeconfig for it to path, pointing at server (the API server
// as the node reaches it, e.g. through a netns relay) and verifying the API server's
// certificate for the name "localhost", which it holds.
func (c *Cluster) NodeKubeconfig(ctx context.Context, node, server, path string) error {
	if err := c.bindNodes(ctx); err != nil {
		return err
	}
	u, err := c.env.AddUser(envtest.User{Name: "system:node:" + node, Groups: []string{"system:nodes"}}, nil)
	if err != nil {
		return fmt.Errorf("provisioning kubelet credentials of node %s: %w", node, err)
	}
	cfg := u.Config()
	cfg.Host = "https://" + server
	cfg.TLSClientConfig.ServerName = "localhost"
	return c.writeKubeconfig(path, cfg)
}

func (c *Cluster) bindNodes(ctx context.Context) error {
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: nodesBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}
	if err := c.Client.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding system:nodes to system:node: %w", err)
	}
	return nil
}
