package fake

import (
	"context"
	"sync"

	"palisade.dev/palisade/providers"
)

// Terminator is a recording fake providers.WorkloadTerminator for unit tests: orders are
// recorded, and each order's state is whatever the test sets (Pending until then).
type Terminator struct {
	mu     sync.Mutex
	orders []string // node/id, in order received
	states map[string]providers.TerminationState
}

var _ providers.WorkloadTerminator = (*Terminator)(nil)

// NewTerminator returns a Terminator whose orders complete with state (Pending: never).
func NewTerminator(state providers.TerminationState) *Terminator {
	return &Terminator{states: map[string]providers.TerminationState{"*": state}}
}

// Name implements providers.WorkloadTerminator.
func (t *Terminator) Name() string { return Name }

// Terminate records the order.
func (t *Terminator) Terminate(_ context.Context, o providers.TerminateOrder) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.orders = append(t.orders, o.Node+"/"+o.ID)
	return nil
}

// Termination answers the state set for every order, Pending before any order arrived.
func (t *Terminator) Termination(_ context.Context, order providers.TerminateOrder) (providers.TerminationState, string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range t.orders {
		if o == order.Node+"/"+order.ID {
			return t.states["*"], "fake", nil
		}
	}
	return providers.TerminationPending, "no order received", nil
}

// Orders lists the orders received, as "node/id".
func (t *Terminator) Orders() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.orders...)
}
