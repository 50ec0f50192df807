// Package app wires palisade-controller: the manager (leader election, metrics, health probes),
// its caches (Leases only in kube-node-lease; pods, Secrets and VolumeAttachments are read from
// the API server when a node is fenced, never cached), the reconcilers and the providers. The
// binary, the tests, the demo and the benchmark all start the controller through it.
package app
