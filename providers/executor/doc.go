// Package executor is the node agent's termination executor: it stops a pod's containers on
// the node's container runtime exactly as the kubelet would, for use when the kubelet has been
// stopped (so nothing restarts them), and confirms by reading their state back. The rules are
// the kubelet's (v1.37 killContainer, executePreStopHook, setTerminationGracePeriod and
// calculateEffectiveGracePeriod), implemented in a pure planning part (plan.go, deadline.go):
// the effective grace period (deletionGracePeriodSeconds, else terminationGracePeriodSeconds,
// else 30; a startup or liveness probe's own grace when that probe is the reason); a Deadline
// that can only be shortened; the preStop hook's run time taken from the grace; a stop signal
// from lifecycle.stopSignal, else the image's STOPSIGNAL (the CRI's record of it from the
// container's creation, as its StopContainer reads it, not the image the name names now), else
// SIGTERM; SIGKILL at the deadline but never sooner than 2 s after the stop signal (which is
// also the one 2 s extension of a preStop hook still running at expiry); and sidecars
// (restartable init containers) signalled only after every main container and every later
// sidecar has ended, waiting within the same grace period. Like the kubelet, it takes the
// hook's run and the wait for a container's turn from the grace period in whole seconds,
// truncated, so SIGKILL comes up to a second later per step than an exact count would give
// (Deadline.KillAt).
// The runtime part (executor.go) drives a Runtime: the containerd implementation uses the CRI
// for listing, status, preStop exec hooks and sandboxes, and containerd's own task API for the
// signals, since the CRI's StopContainer of containerd 1.6 cannot choose the signal. Every
// Terminate ends with a Report of what each container was sent, when, and how it ended.
package executor
