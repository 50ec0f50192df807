// Package agent is the controller's side of the Executor fencing method: it hands a
// Terminate command to a node's agent and reads the agent's account back, on one of two
// channels. ViaDirect: the direct mTLS heartbeat channel (package channel), for a node
// cut off from the API server. ViaAPI: the node's NodeFence, whose palisade.dev/executor-command
// annotation the agent watches and whose palisade.dev/executor-status annotation it answers in,
// for a node whose kubelet is down but whose agent sees the API server. A report of success is
// not enough on either: the order counts as Confirmed only when the runtime read-back the agent
// took with its report shows no workload container running.
package agent
