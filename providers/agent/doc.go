// Package agent is the controller's side of the fencing methods carried out by a node's agent.
// Provider (Executor) hands a Terminate order to the agent and reads its account back, on one
// of two channels: ViaDirect, the direct mTLS heartbeat channel (package channel), for a node
// cut off from the API server; ViaAPI, the palisade.dev/executor-command and executor-status
// annotations of the node's NodeFence, for a node whose kubelet is down. A report of success is
// not enough: the order is Confirmed only when the runtime read-back the agent took with it
// shows no workload container running. The order is taken back when its method ends: no
// longer served on the direct channel, and removed from the NodeFence, which outlives the fence.
// SelfFence relies on an agent cut off from everything fencing itself, after a safe time.
package agent
