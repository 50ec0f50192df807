package redfish

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	bmcredfish "github.com/bmc-toolbox/bmclib/v2/providers/redfish"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/common"
	rf "github.com/stmcginnis/gofish/redfish"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

const (
	// ProviderName is the provider's name in metrics and records.
	ProviderName = "redfish"
	// DefaultTimeout bounds one call (session, command or read, logout).
	DefaultTimeout = 15 * time.Second
	// DefaultPort is HTTPS's.
	DefaultPort = "443"
)

var _ providers.Fencer = (*Provider)(nil)

// Provider is the Redfish Fencer. It is safe for concurrent use.
type Provider struct {
	*power.Fencer[Target]
	power.Settings
}

// New returns a Redfish provider that reads Nodes and Secrets through reader (nil: it can only
// be driven through PowerOff, PowerState and PowerOn with a Target). Options: power.WithTimeout
// (default DefaultTimeout), power.WithLogger.
func New(reader client.Reader, opts ...power.Option) *Provider {
	p := &Provider{Settings: power.NewSettings(reader, DefaultTimeout, opts)}
	p.Fencer = power.NewFencer[Target](ProviderName, p, "the BMC", hints)
	return p
}

// PowerOff resets the system with ForceOff, unless it already reads Off. The system must be
// the node's machine (checkSystem).
func (p *Provider) PowerOff(ctx context.Context, t Target) error {
	return p.call(ctx, t, "powering off", command, func(ctx context.Context, c *bmclib.Client) error {
		return power.SetBMCPower(ctx, c, "off") // bmclib's "off" is ResetType ForceOff
	})
}

// PowerOn resets the system with On. Fencing never calls it; recovery and tests do. The system
// must be the node's machine (checkSystem).
func (p *Provider) PowerOn(ctx context.Context, t Target) error {
	return p.call(ctx, t, "powering on", command, func(ctx context.Context, c *bmclib.Client) error {
		return power.SetBMCPower(ctx, c, "on")
	})
}

// PowerState reads the system's PowerState; one it does not know (PoweringOn, PoweringOff,
// Paused) is power.Unknown, which never confirms a fence. At an IP address it does not compare
// UUIDs: the read-back stays one listing cheaper, and reads the system the command went to
// (the same Name at the address recorded on the fence, power.Fencer.BoundTarget). At a name,
// which may resolve to another address than the command's did, it does.
func (p *Provider) PowerState(ctx context.Context, t Target) (power.State, error) {
	state := power.Unknown
	err := p.call(ctx, t, "reading the power state of", read, func(ctx context.Context, c *bmclib.Client) error {
		s, err := c.GetPowerState(ctx)
		if err != nil {
			return err
		}
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "on":
			state = power.On
		case "off":
			state = power.Off
		}
		return nil
	})
	if err != nil {
		return power.Unknown, err
	}
	return state, nil
}

// kind says whether a call sends a command (checked against the node's systemUUID) or reads
// (checked only when the BMC is named by a host name).
type kind bool

const (
	read    kind = false
	command kind = true
)

// call checks the target, resolves the BMC's host once (power.ResolveCall), opens a bmclib
// client restricted to its Redfish provider, runs fn and closes the client (deleting the
// session), all within the per-call timeout, and classifies any error. Every connection of the
// call, the listing of the systems and bmclib's alike, goes to the one resolved address
// (httpClient), while TLS still verifies the certificate against the host as named.
func (p *Provider) call(ctx context.Context, t Target, verb string, k kind, fn func(context.Context, *bmclib.Client) error) error {
	host, port, err := splitAddress(t.Address)
	if err != nil {
		return providers.NewError(providers.ReasonBadTarget, fmt.Errorf("%s node %s: %w", verb, t, err))
	}
	if t.Username == "" || t.Password == "" {
		return providers.NewError(providers.ReasonBadTarget, fmt.Errorf("%s node %s: no BMC username or password", verb, t))
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	start := time.Now()
	log := p.Log.WithValues("Node", klog.KRef("", t.Node), "address", t.Address, "system", t.System, "action", verb)
	ip, named, log, err := power.ResolveCall(ctx, p.Lookup, host, fmt.Sprintf("%s node %s", verb, t), log, start)
	if err != nil {
		return err
	}
	hc := p.httpClient(t, ip)
	err = p.checkSystem(ctx, hc, host, port, t, k == command || named) // a named BMC's read-back must read the machine the command went to
	if named && errors.Is(err, errOtherMachine) {
		err = fmt.Errorf("%w%s", err, power.NamedBMCNote(host, ip))
	}
	if err == nil {
		bmc := p.client(hc, host, port, t)
		if err = bmc.Open(ctx); err == nil {
			err = fn(ctx, bmc)
			_ = bmc.Close(ctx) // deletes the session; a failure leaves it to expire on the BMC
		}
	}
	if err == nil {
		log.V(1).Info("Redfish call done", "duration", time.Since(start))
		return nil
	}
	reason, cause := classify(ctx, err, t.Password)
	log.V(1).Info("Redfish call failed", "duration", time.Since(start), "reason", reason, "error", cause.Error())
	return providers.NewError(reason, fmt.Errorf("%s node %s: %w", verb, t, cause))
}

var (
	// errAmbiguousSystem marks a system name that more than one of the BMC's systems has.
	errAmbiguousSystem = errors.New("ambiguous system")
	// errOtherMachine marks a system whose UUID is not the node's systemUUID.
	errOtherMachine = errors.New("not the node's machine")
)

// checkSystem makes sure that the system bmclib will act on is one system and, before a
// command or a read through a host name (verifyUUID), that it is the node's machine.
//
// bmclib picks the first system whose Name matches, in whatever order gofish fetched them, but
// Redfish keeps only a system's Id unique, not its Name: with two systems of the same Name the
// command could power off one and the read-back confirm the other. bmclib shows no list of
// systems, so a gofish client of its own lists them (and deletes its session).
//
// A wrong palisade.dev/bmc-address (two nodes' swapped, a typo naming another live server) would
// power off another machine and read it back Off while the node runs on. So before a command the
// system's UUID (the SMBIOS system UUID) must be the node's systemUUID, which the kubelet reads
// from the same SMBIOS table; the two may differ in the byte order of their first three groups
// (power.SameUUID). A mismatch is errOtherMachine and nothing is sent. When either is empty or a
// placeholder (all zeros, all F, AMI's default: power.VerifiableUUID), or the node's is not an
// SMBIOS UUID (a machine-id: power.NodeSMBIOSUUID), nothing is compared: a BMC or a node that
// reports no UUID of its own cannot be verified this way. The command's step says so
// (power.NotIdentified), and why.
//
// With neither a system name nor a UUID to compare there is no listing: bmclib then takes the
// BMC's only system and refuses to choose among several.
func (p *Provider) checkSystem(ctx context.Context, hc *http.Client, host, port string, t Target, verifyUUID bool) error {
	if verifyUUID && !power.NodeSMBIOSUUID(t.SystemUUID) {
		power.NotIdentified(ctx, "%s", cmp.Or(t.Unidentified, "the node reports no SMBIOS UUID"))
		verifyUUID = false
	}
	if t.System == "" && !verifyUUID {
		return nil
	}
	systems, err := p.systems(ctx, hc, host, port, t)
	if err != nil {
		return err
	}
	s, err := actedOn(systems, t.System)
	if err != nil || s == nil || !verifyUUID {
		return err // no system: bmclib refuses with "no matching redfish system"
	}
	if !power.VerifiableUUID(s.UUID) {
		power.NotIdentified(ctx, "the BMC's system %q (Id %q) reports UUID %q: none, not a UUID, or a placeholder the same on many machines", power.ShortUUID(s.Name), power.ShortUUID(s.ID), power.ShortUUID(s.UUID))
		return nil
	}
	if !power.SameUUID(s.UUID, t.SystemUUID) {
		return fmt.Errorf("%w: the BMC at %s says its system %q (Id %s) has UUID %s, but node %s reports systemUUID %s: the node's %s or %s names a machine that is not the node's, and no command was sent to it; set them to the node's own BMC and system (only if they are the node's own and the system reports another identity, annotate the node %s=false)",
			errOtherMachine, t.Address, s.Name, s.ID, power.BareUUID(s.UUID), t.Node, power.BareUUID(t.SystemUUID),
			v1alpha1.AnnotationBMCAddress, v1alpha1.AnnotationRedfishSystem, v1alpha1.AnnotationBMCIdentityCheck)
	}
	return nil
}

// systems lists the BMC's ComputerSystems through a gofish client of its own, whose session it
// deletes.
func (p *Provider) systems(ctx context.Context, hc *http.Client, host, port string, t Target) ([]*rf.ComputerSystem, error) {
	c, err := gofish.ConnectContext(ctx, gofish.ClientConfig{Endpoint: "https://" + net.JoinHostPort(host, port),
		Username: t.Username, Password: t.Password, HTTPClient: hc, BasicAuth: t.BasicAuth})
	if err != nil {
		return nil, err
	}
	defer c.Logout()
	return c.Service.Systems()
}

// actedOn is the system bmclib acts on for the name (its redfishwrapper.Client.System): the
// only system when name is "", else the one whose Name it is; nil when there is none, and
// errAmbiguousSystem when several have it.
func actedOn(systems []*rf.ComputerSystem, name string) (*rf.ComputerSystem, error) {
	systems = slices.DeleteFunc(systems, func(s *rf.ComputerSystem) bool { return s == nil })
	if name == "" && len(systems) == 1 {
		return systems[0], nil
	}
	var named []*rf.ComputerSystem
	var ids []string
	for _, s := range systems {
		if s.Name == name {
			named, ids = append(named, s), append(ids, s.ID)
		}
	}
	if len(named) > 1 {
		slices.Sort(ids) // gofish fetches the systems concurrently
		return nil, fmt.Errorf("%w %q: %d systems on the BMC have this Name (Ids %s), and a Redfish Name, unlike an Id, need not be unique: give the systems distinct Names on the BMC so that %s names one",
			errAmbiguousSystem, name, len(ids), strings.Join(ids, ", "), v1alpha1.AnnotationRedfishSystem)
	}
	if len(named) == 0 {
		return nil, nil
	}
	return named[0], nil
}

// httpClient is an HTTP client that connects to ip whatever host a request names, verifies the
// BMC's certificate (against the host the request names) unless the target says not to, each
// connection bounded by a third of the call.
func (p *Provider) httpClient(t Target, ip netip.Addr) *http.Client {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: t.RootCAs, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // only when the method says so
	d := &net.Dialer{Timeout: p.Timeout / 3}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		return d.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
	}
	// No gzip: the bound below counts the bytes on the wire, and a gzipped page of 1 MiB may
	// unpack to hundreds.
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true, DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &boundedConn{Conn: c, left: maxConnRead}, nil
		},
		TLSHandshakeTimeout: p.Timeout / 3}}
}

// MaxAnswer is about the most of one answer the provider reads from a BMC: a connection (one
// per request: no keep-alive) fails its reads past maxConnRead bytes, TLS and headers
// included. A Redfish resource is a few KiB; gofish reads an error's body whole into the
// error's text, and a BMC's front end in trouble can send an HTML page of any size, which
// would grow the controller's memory for the whole call, and the fence's status past what the
// API server stores.
const (
	MaxAnswer   = 1 << 20
	maxConnRead = MaxAnswer + 64<<10
)

// errAnswerTooLarge is the read error of a connection past maxConnRead.
var errAnswerTooLarge = fmt.Errorf("the BMC's answer is longer than %d bytes: not read further", MaxAnswer)

// boundedConn is a connection whose reads fail once left bytes were read. http.Transport is
// kept as is (bmclib needs the client's transport to be one), and bounded below it.
type boundedConn struct {
	net.Conn
	left int64
}

func (c *boundedConn) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errAnswerTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.Conn.Read(p)
	c.left -= int64(n)
	return n, err
}

// client builds a bmclib client that uses the Redfish provider and nothing else, over hc.
func (p *Provider) client(hc *http.Client, host, port string, t Target) *bmclib.Client {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	c := bmclib.NewClient(host, t.Username, t.Password,
		bmclib.WithLogger(p.Log.WithName("bmclib")),
		bmclib.WithHTTPClient(hc),
		bmclib.WithRedfishPort(port),
		bmclib.WithRedfishUseBasicAuth(t.BasicAuth),
		bmclib.WithRedfishSystemName(t.System),
		bmclib.WithPerProviderTimeout(p.Timeout),
	)
	c.Registry.Drivers = c.Registry.For(bmcredfish.ProviderName)
	return c
}

// splitAddress splits "host", "host:port", "[v6]:port" or a bare IPv6 address; the port
// defaults to 443. A URL is refused: Redfish is always https.
func splitAddress(addr string) (host, port string, err error) {
	if strings.Contains(addr, "://") {
		return "", "", fmt.Errorf("BMC address %q: give host[:port], without a scheme (Redfish is always https)", addr)
	}
	return power.SplitAddress(addr, DefaultPort)
}

// classify turns a bmclib error into a Reason and an error text without the password.
func classify(ctx context.Context, err error, password string) (providers.Reason, error) {
	msg := power.FlattenBMCLib(err)
	// The HTTP client's own timeout is the call's (bmclib sets it from the context's deadline)
	// and may fire an instant before the context is done.
	if ctxErr := ctx.Err(); ctxErr != nil || errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "Client.Timeout exceeded") {
		if ctxErr == nil {
			ctxErr = context.DeadlineExceeded
		}
		return providers.ReasonUnreachable, fmt.Errorf("no answer in time, the command may or may not have taken effect: %w", ctxErr)
	}
	if password != "" {
		msg = strings.ReplaceAll(msg, password, "[redacted]")
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		rf        *common.Error
		netErr    net.Error
	)
	lower := strings.ToLower(msg)
	switch {
	case errors.Is(err, errAmbiguousSystem), errors.Is(err, errOtherMachine):
		return providers.ReasonBadTarget, errors.New(msg)
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify),
		strings.Contains(lower, "x509: "), strings.Contains(lower, "tls: failed to verify certificate"):
		return providers.ReasonUntrustedCertificate, errors.New(msg)
	case errors.As(err, &rf) && (rf.HTTPReturnedStatusCode == http.StatusUnauthorized || rf.HTTPReturnedStatusCode == http.StatusForbidden),
		strings.HasPrefix(lower, "401:"), strings.Contains(lower, " 401: "), strings.Contains(lower, "novalidsession"):
		return providers.ReasonAuthFailed, errors.New(msg)
	case strings.Contains(lower, "no matching redfish system"):
		return providers.ReasonBadTarget, errors.New(msg)
	case errors.As(err, &netErr), strings.Contains(lower, "connection refused"), strings.Contains(lower, "no route to host"),
		strings.Contains(lower, "i/o timeout"), strings.Contains(lower, "no such host"):
		return providers.ReasonUnreachable, errors.New(msg)
	}
	return providers.ReasonRefused, errors.New(msg)
}
