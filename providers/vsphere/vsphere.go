// Package vsphere is the vSphere fencing method: through govmomi it finds the node's virtual
// machine by the BIOS UUID of its spec.providerID ("vsphere://<uuid>"), powers it off
// (PowerOffVM_Task, waited for) and confirms by reading the VM's runtime power state back as
// poweredOff (the power package's fence). Suspended is not off: a suspended VM resumes where it
// stopped, writes included. A VM vCenter does not find is a BadTarget, never Gone: a wrong
// server or datacenter must not look like a machine that no longer exists. BIOS UUIDs are not
// unique in vCenter, so more than one VM with the node's (templates aside) is a BadTarget too,
// never a guess at one of them. Each call logs in with the method's Secret and logs out (the
// logout bounded by LogoutTimeout); vCenter's certificate is verified against the method's CA
// bundle, else the system's CAs, unless the method says insecureSkipVerify.
package vsphere

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/task"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

const (
	// ProviderName is the provider's name in metrics and records.
	ProviderName = "vsphere"
	// DefaultTimeout bounds one call (login, command or read, logout).
	DefaultTimeout = 15 * time.Second
	// LogoutTimeout bounds the logout that ends every call. The logout runs on a context of
	// its own, without the call's deadline, so that a call that ran out of time still ends its
	// session on vCenter; govmomi's SOAP client sets no deadline either, so without this bound
	// a vCenter that hangs on Logout would block the call, and the reconcile waiting on it,
	// forever.
	LogoutTimeout = 5 * time.Second
)

var hints = map[providers.Reason]string{
	providers.ReasonCloudAuthFailed:      "vCenter refused the credentials or the permission: the account in the method's Secret needs VirtualMachine.Interact.PowerOff on the node's VM; then delete this NodeFence to try again.",
	providers.ReasonCloudUnreachable:     "vCenter did not answer in time: check the method's vsphere.server and the controller's network path to it.",
	providers.ReasonCloudRefused:         "vCenter answered with an error: see the message, and the VM's tasks and events in vCenter.",
	providers.ReasonUntrustedCertificate: "vCenter's certificate is not trusted: put the CA that signs it in the Secret named by the method's vsphere.caBundleSecretRef (key ca.crt), then delete this NodeFence to try again.",
	providers.ReasonBadTarget:            "Fix the node's providerID (vsphere://<BIOS UUID>) or the method's vsphere settings named above, then delete this NodeFence to try again.",
}

var _ providers.Fencer = (*Provider)(nil)

// Provider is the vSphere Fencer. It is safe for concurrent use.
type Provider struct {
	*power.Fencer[Target]
	power.Settings
}

// New returns a vSphere provider that reads Nodes and Secrets through reader. Options: power.WithTimeout
// (default DefaultTimeout), power.WithLogger.
func New(reader client.Reader, opts ...power.Option) *Provider {
	p := &Provider{Settings: power.NewSettings(reader, DefaultTimeout, opts)}
	p.Fencer = power.NewFencer[Target](ProviderName, p, "vCenter", hints)
	return p
}

// Target is the VM behind one node, with the credentials to reach vCenter. The credentials
// must never be logged or written to an event or a status.
type Target struct {
	Node   string
	Server string // host[:port]
	UUID   string // the VM's BIOS UUID
	// Username and Password log in to vCenter.
	Username, Password string
	RootCAs            *x509.CertPool
	InsecureSkipVerify bool
}

// String never prints the credentials.
func (t Target) String() string { return fmt.Sprintf("%s (VM %s on %s)", t.Node, t.UUID, t.Server) }

// ParseProviderID returns the BIOS UUID of "vsphere://<uuid>", lower-cased.
func ParseProviderID(id string) (string, error) {
	uuid, ok := strings.CutPrefix(id, "vsphere://")
	uuid = strings.ToLower(strings.TrimPrefix(uuid, "/"))
	if !ok || len(uuid) != 36 || strings.Count(uuid, "-") != 4 || strings.Trim(uuid, "0123456789abcdef-") != "" {
		return "", fmt.Errorf("providerID %q is not a vSphere one (vsphere://<BIOS UUID>)", id)
	}
	return uuid, nil
}

// Target resolves the machine behind the fenced node (the power.Switch's).
func (p *Provider) Target(ctx context.Context, req providers.Request) (Target, error) {
	m := req.Method
	if m.VSphere == nil {
		return Target{}, power.BadTarget("method %s has no vsphere settings", m.Name)
	}
	if p.Reader == nil {
		return Target{}, power.BadTarget("the vsphere provider has no API reader to find the VM of node %s", req.Node())
	}
	node := &corev1.Node{}
	if err := p.Reader.Get(ctx, client.ObjectKey{Name: req.Node()}, node); err != nil {
		return Target{}, providers.NewError(providers.ReasonAPIError, fmt.Errorf("reading node %s: %w", req.Node(), err))
	}
	uuid, err := ParseProviderID(node.Spec.ProviderID)
	if err != nil {
		return Target{}, power.BadTarget("node %s: %v", req.Node(), err)
	}
	if _, _, err := power.SplitAddress(m.VSphere.Server, "443"); err != nil || strings.Contains(m.VSphere.Server, "://") {
		return Target{}, power.BadTarget("method %s: vsphere.server %q: give host[:port]", m.Name, m.VSphere.Server)
	}
	s, err := power.Secret(ctx, p.Reader, m.VSphere.CredentialsSecretRef, "the vCenter credentials")
	if err != nil {
		return Target{}, err
	}
	t := Target{Node: req.Node(), Server: m.VSphere.Server, UUID: uuid, Username: string(s.Data["username"]), Password: string(s.Data["password"]),
		InsecureSkipVerify: m.VSphere.InsecureSkipVerify}
	if t.Username == "" || t.Password == "" {
		ref := m.VSphere.CredentialsSecretRef
		return Target{}, power.BadTarget("Secret %s/%s needs the keys username and password", ref.Namespace, ref.Name)
	}
	if ca := m.VSphere.CABundleSecretRef; ca != nil && !t.InsecureSkipVerify {
		if t.RootCAs, err = power.CAPool(ctx, p.Reader, *ca, "the CA bundle of vCenter"); err != nil {
			return Target{}, err
		}
	}
	return t, nil
}

// PowerOff powers the VM off, unless it is off, and waits for the task.
func (p *Provider) PowerOff(ctx context.Context, t Target) error {
	return p.call(ctx, t, "powering off", func(ctx context.Context, vm *object.VirtualMachine) error {
		state, err := vm.PowerState(ctx)
		if err != nil || state == types.VirtualMachinePowerStatePoweredOff {
			return err
		}
		task, err := vm.PowerOff(ctx)
		if err != nil {
			return err
		}
		return task.Wait(ctx)
	})
}

// PowerOn powers the VM on. Fencing never calls it; recovery and tests do.
func (p *Provider) PowerOn(ctx context.Context, t Target) error {
	return p.call(ctx, t, "powering on", func(ctx context.Context, vm *object.VirtualMachine) error {
		task, err := vm.PowerOn(ctx)
		if err != nil {
			return err
		}
		return task.Wait(ctx)
	})
}

// PowerState reads the VM's power state: poweredOff is Off, poweredOn On, suspended (not off:
// it resumes where it stopped) as it is.
func (p *Provider) PowerState(ctx context.Context, t Target) (power.State, error) {
	state := power.Unknown
	err := p.call(ctx, t, "reading the power state of", func(ctx context.Context, vm *object.VirtualMachine) error {
		s, err := vm.PowerState(ctx)
		switch s {
		case types.VirtualMachinePowerStatePoweredOff:
			state = power.Off
		case types.VirtualMachinePowerStatePoweredOn:
			state = power.On
		default:
			state = power.State(s)
		}
		return err
	})
	if err != nil {
		return power.Unknown, err
	}
	return state, nil
}

// call logs in to vCenter, finds the VM, runs fn, logs out, all within the per-call timeout,
// and classifies any error.
func (p *Provider) call(ctx context.Context, t Target, verb string, fn func(context.Context, *object.VirtualMachine) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	start := time.Now()
	log := p.Log.WithValues("Node", klog.KRef("", t.Node), "server", t.Server, "vm", t.UUID, "action", verb)
	err := p.session(ctx, t, fn)
	if err == nil {
		log.V(1).Info("vSphere call done", "duration", time.Since(start))
		return nil
	}
	reason, cause := classify(ctx, err, t)
	log.V(1).Info("vSphere call failed", "duration", time.Since(start), "reason", reason, "error", cause.Error())
	return providers.NewError(reason, fmt.Errorf("%s the VM of node %s: %w", verb, t, cause))
}

func (p *Provider) session(ctx context.Context, t Target, fn func(context.Context, *object.VirtualMachine) error) error {
	u := &url.URL{Scheme: "https", Host: t.Server, Path: "/sdk"}
	if _, port, err := net.SplitHostPort(t.Server); err != nil || port == "" {
		u.Host = net.JoinHostPort(strings.Trim(t.Server, "[]"), "443")
	}
	sc := soap.NewClient(u, t.InsecureSkipVerify)
	if tr := sc.DefaultTransport(); tr != nil && tr.TLSClientConfig != nil {
		tr.TLSClientConfig.RootCAs = t.RootCAs
		tr.TLSClientConfig.MinVersion = tls.VersionTLS12
	}
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return err
	}
	c := &govmomi.Client{Client: vc, SessionManager: session.NewManager(vc)}
	if err := c.Login(ctx, url.UserPassword(t.Username, t.Password)); err != nil {
		return err
	}
	defer logout(ctx, c)
	vm, err := findVM(ctx, c.Client, t.UUID)
	if err != nil {
		return err
	}
	return fn(ctx, vm)
}

// logout ends the session within LogoutTimeout, also when the call's own context is done.
// Its error is dropped: vCenter expires a session it was not told to end.
func logout(ctx context.Context, c *govmomi.Client) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LogoutTimeout)
	defer cancel()
	_ = c.Logout(ctx)
}

var (
	errVMNotFound  = errors.New("vCenter finds no VM with this BIOS UUID: check the node's providerID and the method's vsphere.server")
	errAmbiguousVM = errors.New("ambiguous VM")
)

// findVM returns the one VM with the BIOS UUID. vCenter does not keep BIOS UUIDs unique (a
// clone that kept it, a template, a placeholder in another datacenter), and acting on the
// first match could power off one VM and read back another, already-off twin as a
// confirmation. Templates are left out: a template cannot be powered on, so it runs no node,
// and its power state (always off) must not confirm anything. More than one VM left is an
// ambiguous target, none a missing one; both are BadTargets (classify).
func findVM(ctx context.Context, c *vim25.Client, uuid string) (*object.VirtualMachine, error) {
	refs, err := object.NewSearchIndex(c).FindAllByUuid(ctx, nil, uuid, true, nil)
	if err != nil {
		return nil, err
	}
	var matches []types.ManagedObjectReference
	for _, r := range refs {
		if vm, ok := r.(*object.VirtualMachine); ok && vm != nil {
			matches = append(matches, vm.Reference())
		}
	}
	if len(matches) == 0 {
		return nil, errVMNotFound
	}
	var vms []mo.VirtualMachine
	if err := property.DefaultCollector(c).Retrieve(ctx, matches, []string{"config.template"}, &vms); err != nil {
		return nil, err
	}
	var found []types.ManagedObjectReference
	for _, vm := range vms {
		if vm.Config == nil || !vm.Config.Template {
			found = append(found, vm.Reference())
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%w (only %d template(s) have it, and a template runs no node)", errVMNotFound, len(vms))
	case 1:
		return object.NewVirtualMachine(c, found[0]), nil
	}
	return nil, fmt.Errorf("%w: %d VMs that are not templates have BIOS UUID %s (a clone that kept its source's, or a copy in another datacenter), and which of them runs the node cannot be told: give each its own BIOS UUID or remove the copy, then delete this NodeFence to try again", errAmbiguousVM, len(found), uuid)
}

func classify(ctx context.Context, err error, t Target) (providers.Reason, error) {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	if t.Password != "" {
		msg = strings.ReplaceAll(msg, t.Password, "[redacted]")
	}
	if ctxErr := ctx.Err(); ctxErr != nil || errors.Is(err, context.DeadlineExceeded) {
		return providers.ReasonCloudUnreachable, fmt.Errorf("no answer in time, the command may or may not have taken effect: %s", msg)
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		verify    *tls.CertificateVerificationError
		netErr    net.Error
	)
	switch {
	case errors.Is(err, errVMNotFound), errors.Is(err, errAmbiguousVM):
		return providers.ReasonBadTarget, errors.New(msg)
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &verify), strings.Contains(msg, "x509: "):
		return providers.ReasonUntrustedCertificate, errors.New(msg)
	case fault.Is(err, &types.InvalidLogin{}), fault.Is(err, &types.NoPermission{}), fault.Is(err, &types.NotAuthenticated{}):
		return providers.ReasonCloudAuthFailed, errors.New(msg)
	case soap.IsSoapFault(err), soap.IsVimFault(err), isTaskError(err):
		return providers.ReasonCloudRefused, errors.New(msg)
	case errors.As(err, &netErr), strings.Contains(msg, "connection refused"), strings.Contains(msg, "no such host"):
		return providers.ReasonCloudUnreachable, errors.New(msg)
	}
	return providers.ReasonCloudRefused, errors.New(msg)
}

func isTaskError(err error) bool {
	var te task.Error
	return errors.As(err, &te) || errors.As(err, new(*task.Error))
}
