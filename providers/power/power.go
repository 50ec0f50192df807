// Package power is the fence of every method that turns a machine off through whatever
// controls its power — a BMC over IPMI or Redfish, later a cloud or a hypervisor: the off
// command, then the power state read back until it is Off (invariant 1), the command sent
// again while it is not, and a failure naming what still reads On once the method's time is
// up. A method supplies only its Switch: how to find the machine and how to talk to it.
package power

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"palisade.dev/palisade/providers"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// State is what a machine's power controller reports. A controller with states of its own
// (EC2's "stopping") may report them as they are: anything but Off and Gone is not off.
type State string

const (
	On      State = "On"
	Off     State = "Off"
	Unknown State = "Unknown"
	// Gone: the controller says, from its own records, that the machine no longer exists (a
	// terminated instance): nothing is left that could run the node's workload. Never from a
	// failure to find it.
	Gone State = "Gone"
)

// ResendOffEvery re-sends the off command every this many checks while the power still reads
// On: a BMC may drop it.
const ResendOffEvery = 5

// Switch is a method's access to the machines' power. T is its target (the machine and the
// credentials to reach it); its String must never print a credential. String is also the
// machine's name recorded on a fence (providers.TargetNamer): two machines must never share
// one, and it must not change between versions, or a fence under way across an upgrade
// fails with ReasonTargetChanged.
type Switch[T fmt.Stringer] interface {
	// Target resolves the machine behind the fenced node from the Node, the method's settings
	// and its Secrets.
	Target(ctx context.Context, req providers.Request) (T, error)
	// PowerOff sends the off command.
	PowerOff(ctx context.Context, t T) error
	// PowerState reads the power state back.
	PowerState(ctx context.Context, t T) (State, error)
}

// Fencer is the providers.Fencer of a Switch.
type Fencer[T fmt.Stringer] struct {
	name  string
	sw    Switch[T]
	what  string // "the BMC", for messages
	hints map[providers.Reason]string
}

// NewFencer returns the Fencer named name of sw; what names the power controller in messages
// ("the BMC"); hints tell a person what to look at for each Reason of error.
func NewFencer[T fmt.Stringer](name string, sw Switch[T], what string, hints map[providers.Reason]string) *Fencer[T] {
	return &Fencer[T]{name: name, sw: sw, what: what, hints: hints}
}

// Name is the method's provider name.
func (f *Fencer[T]) Name() string { return f.name }

func (f *Fencer[T]) withHint(err error) error {
	if err == nil || providers.HintOf(err) != "" { // the Switch's own, for this case
		return err
	}
	return providers.WithHint(err, f.hints[providers.ReasonOf(err)])
}

// FenceTarget names the machine the node's settings name now (T's String), for the caller to
// record before the off command (providers.TargetNamer).
func (f *Fencer[T]) FenceTarget(ctx context.Context, req providers.Request) (string, error) {
	t, err := f.sw.Target(ctx, req)
	if err != nil {
		return "", f.withHint(err)
	}
	name := t.String()
	if len(name) > providers.MaxTargetLength {
		return "", providers.NewError(providers.ReasonBadTarget, fmt.Errorf("the machine of node %s is named in %d bytes, more than the %d a fence can record: shorten its settings", req.Node(), len(name), providers.MaxTargetLength))
	}
	return name, nil
}

// BoundTarget resolves the target of req, and refuses one that is not the machine recorded
// for the method (req.FencedTarget) with ReasonTargetChanged: every call after the name was
// recorded acts on that machine or on none.
func (f *Fencer[T]) BoundTarget(ctx context.Context, req providers.Request) (T, error) {
	t, err := f.sw.Target(ctx, req)
	if err != nil {
		return t, f.withHint(err)
	}
	if named := req.FencedTarget(); named != "" && named != t.String() {
		err := providers.NewError(providers.ReasonTargetChanged, fmt.Errorf(
			"this fence acts on %s, but the node's settings now name %s: nothing is read from or sent to that machine, whose power state says nothing about this node's", named, t))
		return t, providers.WithHint(err, fmt.Sprintf("Find which machine runs node %s and set its settings right; the chain's next method, if there is one, fences the node.", req.Node()))
	}
	return t, nil
}

// RestorePower powers the machine back on, when its Switch can (PowerOn); the caller does it
// only after the fence was released, and only the machine the fence turned off.
func (f *Fencer[T]) RestorePower(ctx context.Context, req providers.Request) error {
	on, ok := f.sw.(interface {
		PowerOn(ctx context.Context, t T) error
	})
	if !ok {
		return providers.NewError(providers.ReasonBadTarget, fmt.Errorf("%s cannot power a machine on", f.name))
	}
	t, err := f.BoundTarget(ctx, req)
	if err != nil {
		return err
	}
	if err := on.PowerOn(ctx, t); err != nil {
		return f.withHint(err)
	}
	return nil
}

// Fence sends the off command to the machine the fence acts on (BoundTarget). Its message
// carries the Switch's notes on the command (NotIdentified): that the machine's identity was not
// checked, and why.
func (f *Fencer[T]) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	t, err := f.BoundTarget(ctx, req)
	if err != nil {
		return providers.Status{}, err
	}
	ctx, notes := WithNotes(ctx)
	if err := f.sw.PowerOff(ctx, t); err != nil {
		return providers.Status{}, f.withHint(err)
	}
	return providers.Status{State: providers.InProgress, Message: fmt.Sprintf("power-off command accepted by %s of %s%s", f.what, t, notes)}, nil
}

// Check reads the power state back until it is Off, re-sending the off command every
// ResendOffEvery attempts while it is not; once the method has expired, power still On is a
// failure. It reads back only the machine the fence acts on (BoundTarget).
func (f *Fencer[T]) Check(ctx context.Context, req providers.Request) (providers.Status, error) {
	t, err := f.BoundTarget(ctx, req)
	if err != nil {
		return providers.Status{}, err
	}
	state, err := f.sw.PowerState(ctx, t)
	if err != nil {
		return providers.Status{}, f.withHint(err)
	}
	switch state {
	case Off:
		return providers.Status{State: providers.Confirmed, Message: fmt.Sprintf("power state Off read back from %s of %s", f.what, t)}, nil
	case Gone:
		return providers.Status{State: providers.Gone, Message: fmt.Sprintf("%s says %s no longer exists", f.what, t)}, nil
	}
	var elapsed time.Duration
	if start := req.Fence.Status.MethodStartTime; start != nil {
		elapsed = req.Now.Sub(start.Time).Round(100 * time.Millisecond)
	}
	reason := providers.ReasonPowerStillOn
	if state == Unknown {
		reason = providers.ReasonPowerStateUnknown // the BMC's answer says neither on nor off
	}
	if req.Expired {
		return providers.Status{State: providers.Failed, Reason: reason,
			Message: fmt.Sprintf("%s of %s still reports power %s %s after the off command; check it and the machine, then delete this NodeFence to try again", f.what, t, state, elapsed)}, nil
	}
	if req.Attempt%ResendOffEvery == 0 {
		if err := f.sw.PowerOff(ctx, t); err != nil {
			return providers.Status{}, f.withHint(err)
		}
	}
	return providers.Status{State: providers.InProgress, Reason: reason,
		Message: fmt.Sprintf("power still reads %s %s after the off command", state, elapsed)}, nil
}

// End does nothing: a power controller holds no order.
func (f *Fencer[T]) End(context.Context, providers.Request) error { return nil }

// Settings are what a power provider is built with: the reader of Nodes and Secrets, the
// bound of one call, the logger.
type Settings struct {
	Reader  client.Reader
	Timeout time.Duration
	Log     logr.Logger
	// Lookup resolves a BMC's host name once per call (ResolveBMC); SystemLookup by default.
	Lookup Lookup
}

// Option configures a provider's Settings.
type Option func(*Settings)

// WithTimeout sets the per-call timeout.
func WithTimeout(d time.Duration) Option { return func(s *Settings) { s.Timeout = d } }

// WithLogger sets the logger.
func WithLogger(l logr.Logger) Option { return func(s *Settings) { s.Log = l } }

// WithLookup sets the resolver of BMC host names (tests: a name that resolves differently at
// each lookup).
func WithLookup(l Lookup) Option { return func(s *Settings) { s.Lookup = l } }

// NewSettings applies opts over reader, the default timeout and a discarding logger.
func NewSettings(reader client.Reader, timeout time.Duration, opts []Option) Settings {
	s := Settings{Reader: reader, Timeout: timeout, Log: logr.Discard(), Lookup: SystemLookup}
	for _, o := range opts {
		o(&s)
	}
	return s
}
