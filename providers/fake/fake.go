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
	MethodFence = "Fence"
	MethodCheck = "Check"
	MethodEnd   = "End"
	// MethodRestorePower is providers.PowerRestorer's.
	MethodRestorePower = "RestorePower"
)

// Name is the fake's provider name.
const Name = "fake"

var (
	_ providers.Fencer        = (*Provider)(nil)
	_ providers.PowerRestorer = (*Provider)(nil)
)

// Call is one recorded call.
type Call struct {
	Method string
	Node   string
}

// Provider is a recording fake Fencer that plays a power switch: Fence turns a node off
// (unless it plays a lying BMC), Check reads Confirmed once it is off and PowerStillOn before,
// Failed once the method's time is up. SetStatus pins Check's answer instead, for a method
// that has no switch (an executor that fails or never confirms).
type Provider struct {
	mu          sync.Mutex
	name        string
	calls       []Call
	fenced      map[string]bool
	ordered     map[string]bool
	errs        map[string][]error
	ignoreFence bool
	status      *providers.Status
}

// New returns a fake named "fake" whose nodes all run.
func New() *Provider { return NewNamed(Name) }

// NewNamed returns a fake with its own provider name.
func NewNamed(name string) *Provider {
	return &Provider{name: name, fenced: map[string]bool{}, ordered: map[string]bool{}, errs: map[string][]error{}}
}

// Name is the fake's name.
func (p *Provider) Name() string { return p.name }

// Fence records the call, returns an injected error if there is one, and otherwise fences the
// node, unless the fake plays a lying BMC.
func (p *Provider) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	err := p.do(ctx, MethodFence, req.Node(), func() {
		p.ordered[req.Node()] = true
		if !p.ignoreFence {
			p.fenced[req.Node()] = true
		}
	})
	if err != nil {
		return providers.Status{}, err
	}
	return providers.Status{State: providers.InProgress, Message: "fake: fence ordered"}, nil
}

// Check records the call, returns an injected error if there is one (with Unknown), and
// otherwise the pinned status or what the switch reads.
func (p *Provider) Check(ctx context.Context, req providers.Request) (providers.Status, error) {
	st := providers.Status{State: providers.Unknown}
	err := p.do(ctx, MethodCheck, req.Node(), func() { st = p.statusLocked(req) })
	return st, err
}

func (p *Provider) statusLocked(req providers.Request) providers.Status {
	switch {
	case p.status != nil && p.ordered[req.Node()]:
		return *p.status
	case p.status != nil:
		return providers.Status{State: providers.InProgress, Reason: providers.ReasonOrderPending, Message: "fake: no order received"}
	case p.fenced[req.Node()]:
		return providers.Status{State: providers.Confirmed, Message: "fake: fenced"}
	case req.Expired:
		return providers.Status{State: providers.Failed, Reason: providers.ReasonPowerStillOn, Message: "fake: still running after the method's timeout"}
	}
	return providers.Status{State: providers.InProgress, Reason: providers.ReasonPowerStillOn, Message: "fake: still running"}
}

// End records the call and returns an injected error if there is one.
func (p *Provider) End(ctx context.Context, req providers.Request) error {
	return p.do(ctx, MethodEnd, req.Node(), func() { delete(p.ordered, req.Node()) })
}

// RestorePower records the call and turns the node back on.
func (p *Provider) RestorePower(ctx context.Context, req providers.Request) error {
	return p.do(ctx, MethodRestorePower, req.Node(), func() {
		p.fenced[req.Node()] = false
		delete(p.ordered, req.Node())
	})
}

// do records a call and runs apply under the lock, unless an error is due: an injected one, or
// the context's (as ReasonUnreachable, like a real provider that timed out).
func (p *Provider) do(ctx context.Context, method, node string, apply func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, Call{Method: method, Node: node})
	if errs := p.errs[method]; len(errs) > 0 {
		p.errs[method] = errs[1:]
		if errs[0] != nil {
			return errs[0]
		}
	}
	if err := ctx.Err(); err != nil {
		return providers.NewError(providers.ReasonUnreachable, fmt.Errorf("%s node %s: %w", method, node, err))
	}
	apply()
	return nil
}

// InjectError makes the next call of method return err instead of acting; errors injected for
// the same method are used in order, one per call, and a nil one lets its call act normally.
// It panics on an unknown method name.
func (p *Provider) InjectError(method string, err error) {
	switch method {
	case MethodFence, MethodCheck, MethodEnd, MethodRestorePower:
	default:
		panic(fmt.Sprintf("fake: InjectError for unknown method %q", method))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs[method] = append(p.errs[method], err)
}

// SetIgnoreFence makes the fake a lying BMC (true): Fence succeeds and changes nothing.
func (p *Provider) SetIgnoreFence(ignore bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ignoreFence = ignore
}

// SetStatus pins what Check answers for a node once Fence was called for it (nil: the switch).
func (p *Provider) SetStatus(st *providers.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = st
}

// SetFenced sets whether a node is fenced, as the physical world would (a pulled plug, a
// machine powered on again).
func (p *Provider) SetFenced(node string, fenced bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fenced[node] = fenced
}

// Fenced says whether a node is fenced; a node never touched is not.
func (p *Provider) Fenced(node string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fenced[node]
}

// Pending says whether an order for the node was given and not ended.
func (p *Provider) Pending(node string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ordered[node]
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

// Reset forgets calls and injected errors; fenced nodes, the pinned status and the lying flag
// stay.
func (p *Provider) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = nil
	p.errs = map[string][]error{}
}
