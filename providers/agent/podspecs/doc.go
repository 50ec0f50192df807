// Package podspecs keeps, on the node agent, the specs of the pods bound to its node while the
// API server answers, for the termination executor: the runtime does not record which init
// containers are sidecars, a container's lifecycle.stopSignal, or a deletion's grace period
// given after the containers were created, and without them the executor stops a pod as the
// kubelet does without its spec. The Keeper lists the pods by spec.nodeName, then watches them,
// decoding only those fields (protocol.Pod), and holds them in memory and in the agent's state
// directory (File, written through a rename on every change of what it keeps), so that an agent
// restarted while the API server is unreachable (the self-fence path) still has them. A pod
// deleted from the API server is dropped; a failed list or watch is tried again with a back-off
// while the kept specs stay as they were.
package podspecs
