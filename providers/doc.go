// Package providers defines how a node is made harmless: one small interface, PowerFencer,
// implemented by each fencing method (IPMI through bmclib in providers/ipmi; a recording fake
// in providers/fake), wrapped once by Decorate for metrics. Providers never import the fencing
// state machine: they are told a Target and answer with a power state or a typed error.
package providers
