package protocol

import "time"

// Version is the protocol's version, which the executor returns in answer to OpConnect; the
// agent refuses an executor that speaks another.
const Version = 1

// MaxLine bounds one line, either way; a longer one is garbage.
const MaxLine = 1 << 20

// MaxError bounds Response.Error, so that a long list of what still runs fits a line.
const MaxError = 16 << 10

// The operations of a Request. Every one connects to the runtime first if the executor is not
// connected yet, and fails when the executor was given the agent's pod UID and the runtime
// holds no sandbox of that pod (it is not the kubelet's); a failed connection is tried again by
// the next request.
const (
	// OpConnect only connects to the container runtime, and answers with Version. The agent
	// sends it first, before it stops the kubelet, and uses an executor only once it succeeded.
	OpConnect = "connect"
	// OpTerminate terminates every pod of the runtime but the agent's own, all at once, each by
	// the kubelet's rules with its grace period capped by GracePeriodSeconds, then reads every
	// pod back and sweeps the runtime. Response.Error is empty only when all of them were read
	// back with no container running.
	OpTerminate = "terminate"
	// OpReadBack counts the runtime's containers, but the agent's own pod's, that have not
	// exited, in Response.Running.
	OpReadBack = "readBack"
)

// Request is one line from the agent to the executor.
type Request struct {
	// ID is unique among the requests sent to one executor process, counting from 1; its
	// Response carries it back.
	ID uint64 `json:"id"`
	// Op is OpConnect, OpTerminate or OpReadBack.
	Op string `json:"op"`
	// Deadline, when set, bounds the request in the executor, which then answers with what it
	// has (an error saying what is left) rather than not at all.
	Deadline time.Time `json:"deadline,omitzero"`
	// Command is the ID of the Terminate command being carried out (OpTerminate), for logs.
	Command string `json:"command,omitempty"`
	// GracePeriodSeconds caps every pod's own grace period (OpTerminate); nil: no cap.
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
}

// Response is one line from the executor to the agent, answering the Request of the same ID.
type Response struct {
	// ID is the Request's.
	ID uint64 `json:"id"`
	// Error says why the request failed; empty when it succeeded.
	Error string `json:"error,omitempty"`
	// Version is the executor's protocol version (OpConnect).
	Version int `json:"version,omitempty"`
	// Pods and Containers count what OpTerminate terminated, also when it failed.
	Pods       int `json:"pods,omitempty"`
	Containers int `json:"containers,omitempty"`
	// Running is OpReadBack's count; nil when it failed.
	Running *int `json:"running,omitempty"`
}
