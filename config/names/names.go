// Package names holds the names the node agent shares with the API (config/v1alpha1) without
// importing it: the agent runs on every node, and the API package would bring in the
// Kubernetes machinery, megabytes of it, for a few strings.
package names

const (
	// AnnotationExecutorCommand on a NodeFence is the controller's order to the node's agent
	// through the API server (see config/v1alpha1).
	AnnotationExecutorCommand = "palisade.dev/executor-command"
	// AnnotationExecutorStatus on a NodeFence is the agent's answer to it.
	AnnotationExecutorStatus = "palisade.dev/executor-status"
	// NodeFenceResource is the NodeFence collection's path in the API.
	NodeFenceResource = "/apis/fencing.palisade.dev/v1alpha1/nodefences"
)
