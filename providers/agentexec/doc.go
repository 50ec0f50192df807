// Package agentexec is the controller's side of the Executor fencing method: it hands a
// Terminate command to a node's agent through the direct mTLS heartbeat channel
// (detectors/agent.Server) and reads the agent's account back. A report of success is not
// enough: the order counts as Confirmed only when a later heartbeat's own read-back of the
// container runtime shows no workload container running.
package agentexec
