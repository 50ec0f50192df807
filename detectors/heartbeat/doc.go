// Package heartbeat is the node agent's life signal: every interval the Heartbeater checks the
// kubelet's healthz and sends a Report to the controller over the direct channel, adopts the
// interval the controller answers with, hands the peers to probe to the prober, the commands to
// the order handler, and what it reached to the self-fencer. It depends on small interfaces of
// its own, which the agent's command wires with the concrete channel client, orders and fencer.
package heartbeat
