package protocol

import (
	"encoding/json"
	"time"
)

// Version is the protocol's version, which the executor returns in answer to OpConnect; the
// agent refuses an executor that speaks another. Version 2 added Request.Pods: an executor of
// version 1 would ignore them and stop sidecars as main containers.
const Version = 2

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
	// Pods are the specs the agent kept of the pods bound to its node (OpTerminate): for a
	// runtime pod of the same UID, the executor takes from it what the runtime does not record
	// (see Pod); a pod without one is restored from the runtime's labels alone.
	//
	// They travel in the request itself, not as the path of the agent's file of them: the
	// agent's memory is what it knows best (the file is absent without --state-dir, and one
	// write behind after a failed write), and the executor needs nothing from the agent's state
	// directory. A line is bounded by MaxLine, so the agent sends at most MaxPodsBytes of them
	// (about 7 KiB a pod for the 110 a node runs at most, where a usual pod's kept fields take
	// under 1 KiB) and leaves the largest out beyond that: those are restored from the labels,
	// as without a spec, and the agent says so.
	Pods []Pod `json:"pods,omitempty"`
}

// MaxPodsBytes bounds the JSON of Request.Pods, leaving the rest of MaxLine to the request.
const MaxPodsBytes = 768 << 10

// Pod is what the agent keeps of one pod bound to its node from the API server: what the
// executor needs that the runtime does not record (which init containers are sidecars, each
// container's lifecycle.stopSignal, and a deletion's grace period given after the containers
// were created). Its fields are a subset of v1.Pod's under v1.Pod's own JSON names, so that the
// agent decodes them from the API server's answers and the executor into a corev1.Pod.
type Pod struct {
	Metadata PodMetadata `json:"metadata"`
	Spec     PodSpec     `json:"spec"`
	// KeptAt is when the API server last sent this pod (in a list or a watch event).
	KeptAt time.Time `json:"keptAt,omitzero"`
}

// PodMetadata is the part of a pod's metadata the executor uses.
type PodMetadata struct {
	Namespace                  string `json:"namespace"`
	Name                       string `json:"name"`
	UID                        string `json:"uid"`
	DeletionGracePeriodSeconds *int64 `json:"deletionGracePeriodSeconds,omitempty"`
}

// PodSpec is the part of a pod's spec the executor uses.
type PodSpec struct {
	TerminationGracePeriodSeconds *int64      `json:"terminationGracePeriodSeconds,omitempty"`
	InitContainers                []Container `json:"initContainers,omitempty"`
	Containers                    []Container `json:"containers,omitempty"`
}

// Container is the part of a container's spec the executor uses. The preStop hook and the
// ports are kept as the API server wrote them: the agent does not read them.
type Container struct {
	Name          string     `json:"name"`
	RestartPolicy string     `json:"restartPolicy,omitempty"`
	Lifecycle     *Lifecycle `json:"lifecycle,omitempty"`
	// Ports is the container's ports, a JSON array of v1.ContainerPort (a named port of an
	// httpGet hook is resolved by them).
	Ports json.RawMessage `json:"ports,omitempty"`
}

// Lifecycle is the part of a container's lifecycle the executor uses.
type Lifecycle struct {
	// PreStop is a v1.LifecycleHandler, as JSON.
	PreStop    json.RawMessage `json:"preStop,omitempty"`
	StopSignal string          `json:"stopSignal,omitempty"`
}

// GraceCut is a pod whose grace period a terminate cut to fit the request's Deadline.
type GraceCut struct {
	// Pod is namespace/name.
	Pod string `json:"pod"`
	// From is the pod's own grace period, To the one it got, in seconds.
	From int64 `json:"from"`
	To   int64 `json:"to"`
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
	// GraceCuts are the pods of OpTerminate whose own grace period the executor cut so that
	// SIGKILL and its read-back fit before the request's Deadline, also when it failed: the
	// kubelet would have given them all of it. An executor older than this field sends none.
	GraceCuts []GraceCut `json:"graceCuts,omitempty"`
	// Running is OpReadBack's count; nil when it failed.
	Running *int `json:"running,omitempty"`
}
