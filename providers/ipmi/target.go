package ipmi

import (
	"context"
	"fmt"

	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

// PowerState is what a BMC reports.
type PowerState = power.State

const (
	PowerOn      = power.On
	PowerOff     = power.Off
	PowerUnknown = power.Unknown
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
	// SystemUUID is the node's status.nodeInfo.systemUUID, the SMBIOS UUID its kubelet read
	// from the machine: before a command (and a read through a host name), the BMC's system
	// GUID must name the same machine (checkMachine).
	SystemUUID string
	// Unidentified says why SystemUUID cannot serve to check the BMC (power.BMC's).
	Unidentified string
}

// String never prints the credentials.
func (t Target) String() string { return fmt.Sprintf("%s (%s)", t.Node, t.Address) }

// target reads the node's BMC address from its annotation and the credentials from the
// method's Secret (or the one the node's annotation names).
func (p *Provider) target(ctx context.Context, req providers.Request) (Target, error) {
	m := req.Method
	if m.IPMI == nil {
		return Target{}, power.BadTarget("method %s has no ipmi settings", m.Name)
	}
	b, err := power.NodeBMC(ctx, p.reader, ProviderName, req.Node(), m.IPMI.CredentialsSecretRef)
	if err != nil {
		return Target{}, err
	}
	t := Target{Node: req.Node(), Address: b.Address, Username: b.Username, Password: b.Password,
		SystemUUID: b.SystemUUID, Unidentified: b.Unidentified}
	if m.IPMI.CipherSuite != nil {
		t.CipherSuite = fmt.Sprint(*m.IPMI.CipherSuite)
	}
	return t, nil
}
