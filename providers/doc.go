// Package providers defines how a node is made harmless: one small interface, Fencer, with its
// contract (idempotent; "unknown" means maybe in progress; confirmation only by read-back),
// implemented once per fencing method (IPMI in providers/ipmi; the node agent's executor and
// self-fence in providers/agent; a recording fake in providers/fake) and wrapped once by
// providers/metrics.Decorate. Each provider resolves its own target from the Node, the method's
// settings and its Secret; providers never import the fencing state machine.
package providers
