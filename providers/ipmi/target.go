package ipmi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// PowerState is what a BMC reports.
type PowerState string

const (
	PowerOn      PowerState = "On"
	PowerOff     PowerState = "Off"
	PowerUnknown PowerState = "Unknown"
)

// Target is the machine behind one node, with the credentials to reach it. Credentials come
// from a Secret and must never be logged or written to an event or a status.
type Target struct {
	// Node is the Kubernetes node name, for logs and errors.
	Node string
	// Address is "host" or "host:port".
	Address  string
	Username string
	Password string
	// CipherSuite is the IPMI cipher suite, "" for the provider's default.
	CipherSuite string
}

// String never prints the credentials.
func (t Target) String() string { return fmt.Sprintf("%s (%s)", t.Node, t.Address) }

// target reads the node's BMC address from its annotation and the credentials from the
// method's Secret (or the one the node's annotation names).
func (p *Provider) target(ctx context.Context, req providers.Request) (Target, error) {
	nodeName, m := req.Node(), req.Method
	bad := func(format string, args ...any) error {
		return providers.NewError(providers.ReasonBadTarget, fmt.Errorf(format, args...))
	}
	if m.IPMI == nil {
		return Target{}, bad("method %s has no ipmi settings", m.Name)
	}
	if p.reader == nil {
		return Target{}, bad("the ipmi provider has no API reader to find the BMC of node %s", nodeName)
	}
	node := &corev1.Node{}
	if err := p.reader.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
		return Target{}, providers.NewError(providers.ReasonAPIError, fmt.Errorf("reading node %s: %w", nodeName, err))
	}
	addr := node.Annotations[v1alpha1.AnnotationBMCAddress]
	if addr == "" {
		return Target{}, bad("node %s has no annotation %s: set it to the BMC's host[:port]", nodeName, v1alpha1.AnnotationBMCAddress)
	}
	ref := m.IPMI.CredentialsSecretRef
	if name := node.Annotations[v1alpha1.AnnotationBMCSecret]; name != "" {
		ref.Name = name
	}
	secret := &corev1.Secret{}
	if err := p.reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return Target{}, bad("Secret %s/%s with the BMC credentials of node %s does not exist", ref.Namespace, ref.Name, nodeName)
		}
		return Target{}, providers.NewError(providers.ReasonAPIError, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err))
	}
	t := Target{Node: nodeName, Address: addr,
		Username: string(secret.Data["username"]), Password: string(secret.Data["password"])}
	if t.Username == "" || t.Password == "" {
		return Target{}, bad("Secret %s/%s needs the keys username and password", ref.Namespace, ref.Name)
	}
	if m.IPMI.CipherSuite != nil {
		t.CipherSuite = fmt.Sprint(*m.IPMI.CipherSuite)
	}
	return t, nil
}
