package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	"github.com/bmc-toolbox/bmclib/v2/providers/ipmitool"
	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

const (
	// ProviderName is the provider's name in metrics and records.
	ProviderName = "ipmi"
	// DefaultTimeout bounds one call (ping, open, command, close). A fencing method's timeout is
	// typically 30-60 s and the controller retries, so one call must leave room for a second.
	DefaultTimeout = 15 * time.Second
	// DefaultProbeTimeout bounds the IPMI ping that tells an unreachable BMC apart.
	DefaultProbeTimeout = 3 * time.Second
	// DefaultCipherSuite is used when the Target names none: without one, ipmitool probes the
	// suites for about 10 s.
	DefaultCipherSuite = "3"
	// DefaultPort is IPMI's UDP port.
	DefaultPort = "623"
)

var _ providers.Fencer = (*Provider)(nil)

// Provider is the IPMI Fencer. It is safe for concurrent use.
type Provider struct {
	reader       client.Reader
	ipmitoolPath string
	lookPathErr  error
	timeout      time.Duration
	probeTimeout time.Duration
	log          logr.Logger
	// lookup resolves a BMC's host name (power.SystemLookup; tests replace it).
	lookup power.Lookup
}

// Option configures a Provider.
type Option func(*Provider)

// WithIpmitoolPath sets the ipmitool binary, a path or a name looked up in $PATH (default
// "ipmitool").
func WithIpmitoolPath(path string) Option { return func(p *Provider) { p.ipmitoolPath = path } }

// WithTimeout sets the per-call timeout (default 15 s).
func WithTimeout(d time.Duration) Option { return func(p *Provider) { p.timeout = d } }

// WithProbeTimeout sets how long the IPMI ping waits for an answer (default 3 s); it is
// capped at half the per-call timeout.
func WithProbeTimeout(d time.Duration) Option { return func(p *Provider) { p.probeTimeout = d } }

// WithLogger sets the logger, also handed to bmclib.
func WithLogger(l logr.Logger) Option { return func(p *Provider) { p.log = l } }

// New returns an IPMI provider that reads Nodes and Secrets through reader (nil: it can only
// be driven through PowerOff, PowerState and PowerOn with a Target).
func New(reader client.Reader, opts ...Option) *Provider {
	p := &Provider{reader: reader, timeout: DefaultTimeout, probeTimeout: DefaultProbeTimeout, log: logr.Discard(), lookup: power.SystemLookup}
	for _, o := range opts {
		o(p)
	}
	if p.ipmitoolPath == "" {
		p.ipmitoolPath = "ipmitool"
	}
	// bmclib wants a path that exists: resolve a bare name through $PATH once.
	p.ipmitoolPath, p.lookPathErr = exec.LookPath(p.ipmitoolPath)
	if p.probeTimeout > p.timeout/2 { // leave ipmitool at least half of the call
		p.probeTimeout = p.timeout / 2
	}
	return p
}

// Name is "ipmi".
func (p *Provider) Name() string { return ProviderName }

// PowerOff sends "chassis power off" unless the BMC already reports the chassis off. bmclib
// sends it only to a chassis it reads on, and takes any other answer for off: an answer to
// "chassis power status" that says neither (parsePowerState) is refused here with
// PowerStateUnknown and the BMC's words, rather than "accepted" with nothing sent.
func (p *Provider) PowerOff(ctx context.Context, t Target) error {
	return p.call(ctx, t, "powering off", command, func(ctx context.Context, c *bmclib.Client) error {
		s, err := c.GetPowerState(ctx)
		if err != nil {
			return err
		}
		switch parsePowerState(s) {
		case PowerOff:
			return nil
		case PowerUnknown:
			return providers.NewError(providers.ReasonPowerStateUnknown,
				fmt.Errorf("the BMC's answer to \"chassis power status\" says neither on nor off (%.200q), so no off command was sent", strings.TrimSpace(s)))
		}
		return power.SetBMCPower(ctx, c, "off")
	})
}

// PowerOn sends "chassis power on" unless the BMC already reports the chassis on. Fencing
// never calls it; recovery and tests do.
func (p *Provider) PowerOn(ctx context.Context, t Target) error {
	return p.call(ctx, t, "powering on", command, func(ctx context.Context, c *bmclib.Client) error {
		return power.SetBMCPower(ctx, c, "on")
	})
}

// PowerState reads "chassis power status"; an answer that does not say one state plainly is
// PowerUnknown (parsePowerState). A BMC named by a host name, which may resolve to another
// address than the command's did, must be the node's machine (checkMachine), as before a
// command.
func (p *Provider) PowerState(ctx context.Context, t Target) (PowerState, error) {
	state := PowerUnknown
	err := p.call(ctx, t, "reading the power state of", read, func(ctx context.Context, c *bmclib.Client) error {
		s, err := c.GetPowerState(ctx)
		if err != nil {
			return err
		}
		state = parsePowerState(s)
		return nil
	})
	if err != nil {
		return PowerUnknown, err
	}
	return state, nil
}

// The lines ipmitool's "chassis power status" prints (ipmi_chassis_print_power_status), and
// the words every such line starts with.
const (
	statusOn     = "Chassis Power is on"
	statusOff    = "Chassis Power is off"
	statusPrefix = "chassis power is"
)

// parsePowerState reads ipmitool's "chassis power status" output, which bmclib hands over as
// it came, stdout and stderr together. A stray word on another line (a warning that ends in
// "off") must not decide the state, so the state is On or Off only when exactly one line,
// trimmed and in any case, says "Chassis Power is on" or "Chassis Power is off" and no other
// line speaks of the chassis power; anything else is PowerUnknown, never a confirmation.
func parsePowerState(s string) PowerState {
	var on, off, other int
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.EqualFold(line, statusOn):
			on++
		case strings.EqualFold(line, statusOff):
			off++
		case strings.Contains(strings.ToLower(line), statusPrefix):
			other++
		}
	}
	switch {
	case other > 0 || on+off != 1:
		return PowerUnknown
	case on == 1:
		return PowerOn
	}
	return PowerOff
}

// kind says whether a call sends a command (checked against the node's systemUUID) or reads
// (checked only when the BMC is named by a host name).
type kind bool

const (
	read    kind = false
	command kind = true
)

// call checks the target, resolves the BMC's host once (power.ResolveCall), pings the BMC,
// makes sure before a command (or a read through a host name) that the BMC is the node's
// machine's (checkMachine), opens a bmclib client restricted to ipmitool, runs fn and closes
// the client, all within the per-call timeout, and classifies any error.
func (p *Provider) call(ctx context.Context, t Target, verb string, k kind, fn func(context.Context, *bmclib.Client) error) error {
	host, port, err := p.check(t)
	if err != nil {
		return providers.NewError(providers.ReasonBadTarget, fmt.Errorf("%s node %s: %w", verb, t, err))
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	start := time.Now()
	log := p.log.WithValues("Node", klog.KRef("", t.Node), "address", t.Address, "action", verb)
	ip, named, log, err := power.ResolveCall(ctx, p.lookup, host, fmt.Sprintf("%s node %s", verb, t), log, start)
	if err != nil {
		return err
	}
	name := host
	host = ip.String()
	if err := probe(ctx, net.JoinHostPort(host, port), p.probeTimeout); err != nil {
		log.V(1).Info("BMC did not answer the IPMI ping", "duration", time.Since(start), "error", err.Error())
		return providers.NewError(providers.ReasonUnreachable, fmt.Errorf("%s node %s: %w", verb, t, err))
	}
	if k == command || named { // a named BMC's read-back must read the machine the command went to
		if err := checkMachine(ctx, net.JoinHostPort(host, port), t, min(guidTimeout, p.timeout/4), log); err != nil {
			if named {
				err = fmt.Errorf("%w%s", err, power.NamedBMCNote(name, ip))
			}
			log.V(1).Info("IPMI call refused", "duration", time.Since(start), "reason", providers.ReasonBadTarget, "error", err.Error())
			return providers.NewError(providers.ReasonBadTarget, fmt.Errorf("%s node %s: %w", verb, t, err))
		}
	}
	bmc := p.client(host, port, t)
	step := time.Now()
	err = bmc.Open(ctx)
	if err == nil {
		step = time.Now()
		err = fn(ctx, bmc)
		_ = bmc.Close(ctx) // ipmitool keeps no session: nothing to fail
	}
	if err == nil {
		log.V(1).Info("IPMI call done", "duration", time.Since(start))
		return nil
	}
	reason, cause := classify(ctx, err, time.Since(step), t.Password)
	log.V(1).Info("IPMI call failed", "duration", time.Since(start), "reason", reason, "error", cause.Error())
	return providers.NewError(reason, fmt.Errorf("%s node %s: %w", verb, t, cause))
}

// check validates the target and splits its address into host and port.
func (p *Provider) check(t Target) (host, port string, err error) {
	if p.lookPathErr != nil {
		return "", "", fmt.Errorf("finding ipmitool: %w", p.lookPathErr)
	}
	host, port, err = splitAddress(t.Address)
	if err != nil {
		return "", "", err
	}
	switch {
	case t.Username == "" && t.Password == "":
		return "", "", errors.New("no BMC credentials")
	case t.Username == "":
		return "", "", errors.New("no BMC username")
	case t.Password == "":
		return "", "", errors.New("no BMC password")
	case strings.HasPrefix(t.Username, "-"):
		return "", "", errors.New("BMC username starts with '-'")
	}
	if t.CipherSuite != "" {
		if n, err := strconv.Atoi(t.CipherSuite); err != nil || n < 0 || n > 255 {
			return "", "", fmt.Errorf("malformed IPMI cipher suite %q", t.CipherSuite)
		}
	}
	return host, port, nil
}

// splitAddress splits "host", "host:port", "[v6]:port" or a bare IPv6 address; the port
// defaults to IPMI's.
func splitAddress(addr string) (host, port string, err error) {
	return power.SplitAddress(addr, DefaultPort)
}

// client builds a bmclib client that uses the ipmitool provider and nothing else.
func (p *Provider) client(host, port string, t Target) *bmclib.Client {
	cipher := t.CipherSuite
	if cipher == "" {
		cipher = DefaultCipherSuite
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // bmclib joins host and port with a plain ':'
	}
	c := bmclib.NewClient(host, t.Username, t.Password,
		bmclib.WithLogger(p.log.WithName("bmclib")),
		bmclib.WithIpmitoolPath(p.ipmitoolPath),
		bmclib.WithIpmitoolPort(port),
		bmclib.WithIpmitoolCipherSuite(cipher),
		bmclib.WithPerProviderTimeout(p.timeout),
	)
	c.Registry.Drivers = c.Registry.For(ipmitool.ProviderName)
	return c
}
