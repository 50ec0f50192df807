package fake

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"palisade.dev/palisade/providers"
)

// Method names, as recorded in Calls and accepted by InjectError.
const (
	MethodPowerOff   = "PowerOff"
	MethodPowerState = "PowerState"
	MethodPowerOn    = "PowerOn"
)

// Name is the fake's provider name.
const Name = "fake"

var _ providers.PowerFencer = (*Provider)(nil)

// Call is one recorded call.
type Call struct {
	Method string
	Node   string
}

// Provider is a recording fake PowerFencer.
type Provider struct {
	mu        sync.Mutex
	calls     []Call
	power     map[string]providers.PowerState
	errs      map[string][]error
	ignoreOff bool
}

// New returns a fake whose nodes are all powered on.
func New() *Provider {
	return &Provider{power: map[string]providers.PowerState{}, errs: map[string][]error{}}
}

// Name is "fake".
func (p *Provider) Name() string { return Name }

// PowerOff records the call, returns an injected error if there is one, and otherwise powers
// the node off, unless the fake plays a lying BMC.
func (p *Provider) PowerOff(ctx context.Context, t providers.Target) error {
	return p.do(ctx, MethodPowerOff, t, func() {
		if !p.ignoreOff {
			p.power[t.Node] = providers.PowerOff
		}
	})
}

// PowerOn records the call, returns an injected error if there is one, and otherwise powers
// the node on.
func (p *Provider) PowerOn(ctx context.Context, t providers.Target) error {
	return p.do(ctx, MethodPowerOn, t, func() { p.power[t.Node] = providers.PowerOn })
}

// PowerState records the call, returns an injected error if there is one (with PowerUnknown),
// and otherwise the node's power state.
func (p *Provider) PowerState(ctx context.Context, t providers.Target) (providers.PowerState, error) {
	state := providers.PowerUnknown
	err := p.do(ctx, MethodPowerState, t, func() { state = p.stateLocked(t.Node) })
	return state, err
}

// do records a call and runs apply under the lock, unless an error is due: an injected one, or
// the context's (as ReasonUnreachable, like a real provider that timed out).
func (p *Provider) do(ctx context.Context, method string, t providers.Target, apply func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, Call{Method: method, Node: t.Node})
	if errs := p.errs[method]; len(errs) > 0 {
		p.errs[method] = errs[1:]
		if errs[0] != nil {
			return errs[0]
		}
	}
	if err := ctx.Err(); err != nil {
		return providers.NewError(providers.ReasonUnreachable, fmt.Errorf("%s node %s: %w", method, t, err))
	}
	apply()
	return nil
}

// InjectError makes the next call of method return err instead of acting; errors injected for
// the same method are used in order, one per call, and a nil one lets its call act normally.
// It panics on an unknown method name.
func (p *Provider) InjectError(method string, err error) {
	switch method {
	case MethodPowerOff, MethodPowerState, MethodPowerOn:
	default:
		panic(fmt.Sprintf("fake: InjectError for unknown method %q", method))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs[method] = append(p.errs[method], err)
}

// SetIgnoreOff makes the fake a lying BMC (true): PowerOff succeeds and changes nothing.
func (p *Provider) SetIgnoreOff(ignore bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ignoreOff = ignore
}

// SetPower sets a node's power state, as the physical world would.
func (p *Provider) SetPower(node string, state providers.PowerState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.power[node] = state
}

// Power is a node's power state; a node never touched is On.
func (p *Provider) Power(node string) providers.PowerState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stateLocked(node)
}

func (p *Provider) stateLocked(node string) providers.PowerState {
	if s, ok := p.power[node]; ok {
		return s
	}
	return providers.PowerOn
}

// Calls returns a copy of the calls so far, oldest first.
func (p *Provider) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// CallCount is how many times method was called for node ("" for any node).
func (p *Provider) CallCount(method, node string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if c.Method == method && (node == "" || c.Node == node) {
			n++
		}
	}
	return n
}

// Reset forgets calls and injected errors; power states and the lying flag stay.
func (p *Provider) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = nil
	p.errs = map[string][]error{}
}
