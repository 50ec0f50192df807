package power

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// BMC is what a node's annotations and its Secret say of its BMC. The credentials must never
// be logged or written to an event or a status.
type BMC struct {
	Node               *corev1.Node
	Address            string
	Username, Password string
	// SystemUUID is the node's status.nodeInfo.systemUUID, for the method to check the BMC's
	// identity against before a power command; "" when the node's
	// palisade.dev/bmc-identity-check annotation is "false".
	SystemUUID string
	// Unidentified says why the node's side cannot serve to check the BMC's identity (""
	// when its systemUUID can): the check switched off by annotation, or a systemUUID that is
	// no SMBIOS UUID (NodeSMBIOSUUID).
	Unidentified string
}

// NodeBMC reads node's BMC address from its palisade.dev/bmc-address annotation and the
// credentials from the Secret ref names, or the one its palisade.dev/bmc-secret annotation
// names in the same namespace. Errors carry their Reason (BadTarget, APIError).
func NodeBMC(ctx context.Context, reader client.Reader, provider, nodeName string, ref v1alpha1.SecretReference) (BMC, error) {
	if reader == nil {
		return BMC{}, BadTarget("the %s provider has no API reader to find the BMC of node %s", provider, nodeName)
	}
	node := &corev1.Node{}
	if err := reader.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
		if apierrors.IsNotFound(err) { // a NodeFence made by hand for no node: nothing to retry for
			return BMC{}, BadTarget("node %s does not exist: its BMC (annotation %s) is unknown", nodeName, v1alpha1.AnnotationBMCAddress)
		}
		return BMC{}, providers.NewError(providers.ReasonAPIError, fmt.Errorf("reading node %s: %w", nodeName, err))
	}
	addr := node.Annotations[v1alpha1.AnnotationBMCAddress]
	if addr == "" {
		return BMC{}, BadTarget("node %s has no annotation %s: set it to the BMC's host[:port]", nodeName, v1alpha1.AnnotationBMCAddress)
	}
	systemUUID, unidentified := node.Status.NodeInfo.SystemUUID, ""
	switch check := node.Annotations[v1alpha1.AnnotationBMCIdentityCheck]; check {
	case "", "true":
		if !NodeSMBIOSUUID(systemUUID) {
			unidentified = fmt.Sprintf("node %s reports systemUUID %q, which is no SMBIOS UUID a BMC could tell (none, a placeholder, or a machine-id)", nodeName, ShortUUID(systemUUID))
		}
	case "false":
		systemUUID, unidentified = "", fmt.Sprintf("the check is switched off by node %s's annotation %s=false", nodeName, v1alpha1.AnnotationBMCIdentityCheck)
	default:
		return BMC{}, BadTarget("node %s's annotation %s=%q is neither \"true\" nor \"false\": remove it to check that the BMC is the node's machine before a power command, or set \"false\" only for the node's own BMC when it reports another identity than the node's systemUUID",
			nodeName, v1alpha1.AnnotationBMCIdentityCheck, check)
	}
	if name := node.Annotations[v1alpha1.AnnotationBMCSecret]; name != "" {
		// A name the API refuses in a path ("a/b", "..") fails in client-go with an error that
		// is not NotFound, which would be retried as an APIError for the method's whole time.
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			return BMC{}, BadTarget("node %s's annotation %s=%q is malformed (%s): give the name of a Secret in namespace %s (a DNS-1123 subdomain: lower-case letters, digits, '-' and '.'), with the keys username and password",
				nodeName, v1alpha1.AnnotationBMCSecret, name, strings.Join(msgs, "; "), ref.Namespace)
		}
		ref.Name = name
	}
	secret, err := Secret(ctx, reader, ref, "the BMC credentials of node "+nodeName)
	if err != nil {
		return BMC{}, err
	}
	b := BMC{Node: node, Address: addr, Username: string(secret.Data["username"]), Password: string(secret.Data["password"]),
		SystemUUID: systemUUID, Unidentified: unidentified}
	if b.Username == "" || b.Password == "" {
		return BMC{}, BadTarget("Secret %s/%s needs the keys username and password", ref.Namespace, ref.Name)
	}
	return b, nil
}

// Secret reads the Secret ref names; what says what it holds, for the error. A reference no
// Secret can have is a BadTarget before any read: client-go refuses such a name or namespace
// with an error that is not NotFound, which would be retried as an APIError.
func Secret(ctx context.Context, reader client.Reader, ref v1alpha1.SecretReference, what string) (*corev1.Secret, error) {
	var msgs []string
	for _, m := range validation.IsDNS1123Label(ref.Namespace) {
		msgs = append(msgs, "namespace: "+m)
	}
	for _, m := range validation.IsDNS1123Subdomain(ref.Name) {
		msgs = append(msgs, "name: "+m)
	}
	if len(msgs) > 0 {
		return nil, BadTarget("the Secret reference %q/%q to %s is malformed (%s): give a namespace that is a DNS-1123 label and a name that is a DNS-1123 subdomain",
			ref.Namespace, ref.Name, what, strings.Join(msgs, "; "))
	}
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, BadTarget("Secret %s/%s with %s does not exist", ref.Namespace, ref.Name, what)
		}
		return nil, providers.NewError(providers.ReasonAPIError, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err))
	}
	return secret, nil
}

// CABundleKey is the key of a CA bundle Secret that holds the PEM certificates.
const CABundleKey = "ca.crt"

// CAPool reads the CA bundle Secret ref names (key ca.crt) into a pool.
func CAPool(ctx context.Context, reader client.Reader, ref v1alpha1.SecretReference, what string) (*x509.CertPool, error) {
	s, err := Secret(ctx, reader, ref, what)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data[CABundleKey]) {
		return nil, BadTarget("Secret %s/%s has no PEM certificate under key %s", ref.Namespace, ref.Name, CABundleKey)
	}
	return pool, nil
}

// BadTarget is a BadTarget provider error.
func BadTarget(format string, args ...any) error {
	return providers.NewError(providers.ReasonBadTarget, fmt.Errorf(format, args...))
}

// SetBMCPower sets a bmclib client's power state ("on", "off": bmclib's ForceOff on Redfish,
// "chassis power off" on IPMI) and fails when the BMC does not acknowledge it.
func SetBMCPower(ctx context.Context, c *bmclib.Client, state string) error {
	ok, err := c.SetPowerState(ctx, state)
	if err == nil && !ok {
		err = fmt.Errorf("BMC did not acknowledge power %s", state)
	}
	return err
}

// bmclibSummaries are what bmclib appends after its providers' errors.
var bmclibSummaries = map[string]bool{
	"no Opener implementations found": true,
	"failed to set power state":       true,
	"failed to get power state":       true,
}

// FlattenBMCLib joins the errors of bmclib's multierror on one line, without repeats and without
// bmclib's summaries when there is more to say.
func FlattenBMCLib(err error) string {
	errs := []error{err}
	var multi interface{ WrappedErrors() []error }
	if errors.As(err, &multi) {
		errs = multi.WrappedErrors()
	}
	var parts, summaries []string
	seen := map[string]bool{}
	for _, e := range errs {
		s := strings.Join(strings.Fields(e.Error()), " ")
		switch {
		case s == "" || seen[s]:
		case bmclibSummaries[s]:
			summaries = append(summaries, s)
		default:
			parts = append(parts, s)
		}
		seen[s] = true
	}
	if len(parts) == 0 {
		parts = summaries
	}
	return strings.Join(parts, "; ")
}

// ShortUUID is a UUID, or another identifier, as a node or a BMC reports it, cut to 64 bytes
// for a message: what they report is not checked to be one.
func ShortUUID(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "…"
}
