// Package agentwire holds the messages the node agent and the controller exchange: the
// heartbeat Report and its Response, the peers to probe, the Command an agent carries out and
// the ExecutorStatus it answers with (in heartbeats, or in an APIReport on its NodeFence), and
// the Heartbeat record the controller keeps of each node. It imports the standard library only,
// so that both sides can share it without pulling in the other's dependencies.
package agentwire
