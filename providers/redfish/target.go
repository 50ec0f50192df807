package redfish

import (
	"context"
	"crypto/x509"
	"fmt"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

// CABundleKey is the key of the CA bundle Secret that holds the PEM certificates.
const CABundleKey = power.CABundleKey

// hints tell an operator what to look at for each kind of failure.
var hints = map[providers.Reason]string{
	providers.ReasonUnreachable:          "Check the node's " + v1alpha1.AnnotationBMCAddress + " annotation and the network path from the controller to the BMC's HTTPS port, then delete this NodeFence to try again.",
	providers.ReasonAuthFailed:           "The BMC refused the credentials: check the username and password in the BMC Secret and the account's role on the BMC, then delete this NodeFence to try again.",
	providers.ReasonUntrustedCertificate: "The BMC's certificate is not trusted: put the CA that signs it in the Secret named by the method's redfish.caBundleSecretRef (key " + CABundleKey + "), or make the certificate name the address in " + v1alpha1.AnnotationBMCAddress + ", then delete this NodeFence to try again.",
	providers.ReasonRefused:              "The BMC answered but did not carry out the command: check the BMC's own logs.",
	providers.ReasonBadTarget:            "Fix the node's Redfish settings named above, then delete this NodeFence to try again.",
}

// Target is the machine behind one node, with the credentials to reach it. Credentials come
// from a Secret and must never be logged or written to an event or a status.
type Target struct {
	// Node is the Kubernetes node name, for logs and errors.
	Node string
	// Address is "host" or "host:port".
	Address string
	// System is the ComputerSystem's Name, "" for the BMC's only system.
	System string
	// SystemUUID is the node's status.nodeInfo.systemUUID, the SMBIOS UUID its kubelet read
	// from the machine it runs on; before a command the system's UUID must be this one (""
	// checks nothing). It is not part of String: the node reports it, the settings do not
	// name it.
	SystemUUID string
	// Unidentified says why SystemUUID cannot serve to check the system (power.BMC's).
	Unidentified string
	Username     string
	Password     string
	// RootCAs verify the BMC's certificate; nil means the system's CAs.
	RootCAs *x509.CertPool
	// InsecureSkipVerify skips that verification.
	InsecureSkipVerify bool
	// BasicAuth sends the credentials with every request instead of opening a session.
	BasicAuth bool
}

// String never prints the credentials.
func (t Target) String() string {
	if t.System != "" {
		return fmt.Sprintf("%s (%s, system %q)", t.Node, t.Address, t.System)
	}
	return fmt.Sprintf("%s (%s)", t.Node, t.Address)
}

// target reads the node's BMC address and system from its annotations, the credentials from
// the method's Secret (or the one the node's annotation names) and the CA bundle.
// Target resolves the machine behind the fenced node (the power.Switch's).
func (p *Provider) Target(ctx context.Context, req providers.Request) (Target, error) {
	m := req.Method
	if m.Redfish == nil {
		return Target{}, power.BadTarget("method %s has no redfish settings", m.Name)
	}
	b, err := power.NodeBMC(ctx, p.Reader, ProviderName, req.Node(), m.Redfish.CredentialsSecretRef)
	if err != nil {
		return Target{}, err
	}
	if _, _, err := splitAddress(b.Address); err != nil {
		return Target{}, power.BadTarget("node %s: annotation %s: %v", req.Node(), v1alpha1.AnnotationBMCAddress, err)
	}
	t := Target{Node: req.Node(), Address: b.Address, System: b.Node.Annotations[v1alpha1.AnnotationRedfishSystem],
		SystemUUID: b.SystemUUID, Unidentified: b.Unidentified, Username: b.Username, Password: b.Password,
		InsecureSkipVerify: m.Redfish.InsecureSkipVerify, BasicAuth: m.Redfish.BasicAuth}
	if ca := m.Redfish.CABundleSecretRef; ca != nil && !t.InsecureSkipVerify {
		if t.RootCAs, err = power.CAPool(ctx, p.Reader, *ca, "the CA bundle of the BMCs"); err != nil {
			return Target{}, err
		}
	}
	return t, nil
}
