// Package node is palisade-executor's side of the agent's protocol (providers/executor/protocol):
// it answers the agent's requests over the node's container runtime, once it has checked, when it
// knows the agent's own pod, that the runtime holds that pod's sandbox and so is the kubelet's.
// For a terminate it lists the runtime's pods by the kubelet's labels, leaving out the agent's own,
// rebuilds each one from those labels and the kubelet's container annotations (restore.go), as the
// kubelet does without the pod's spec, completed by the spec the agent kept of the pod when the
// request carries one (spec.go: sidecars, stop signals, a later deletion's grace period),
// terminates all of them at once with the termination executor (providers/executor), reads every
// pod back and sweeps the whole runtime; a read-back counts the containers still running.
package node
