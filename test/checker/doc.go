// Package checker judges a chaos run from its records alone, independently of the
// controller's code: the witness store's history (package witness) and the API server's audit
// log. It never imports fencing, providers or detectors, and reads NodeFences as plain JSON.
//
// The checks, each a function returning Violations:
//
//   - OneCopy (a): no two writers — sessions — of one pod name accepted at overlapping times.
//     A writer is alive from its first accepted write (the session's open) to its last; two
//     writers overlap when each started before the other's last accepted write, less the
//     tolerance (default 0). At most one copy of each pet.
//   - NoEarlyRelease (b): no release of a node before a confirmed fence of it. A release is the
//     node.kubernetes.io/out-of-service taint appearing on the Node, a pod bound to the node
//     deleted with gracePeriodSeconds 0 or its status written to phase Failed (its controller
//     replaces a Failed pod at once) by anyone but that node's own kubelet, or a
//     VolumeAttachment of the node deleted by one of Input.Releasers. A confirmed fence is a
//     NodeFence for the node whose Fenced condition the API accepted as True, and not deleted
//     since.
//   - NoHealthyFenced (c): no NodeFence created, and no power-off sent, for a node outside
//     Input.MayFence (the nodes the run's faults struck), nor for one of them before the first
//     fault that may fence it struck.
//   - FencesEnd (d): every NodeFence reaches phase Released, or Failed with a reason in its
//     Fenced condition, within Input.FenceBound of its creation, not counting Input.Outages
//     (spans in which the controllers could not reach the API server). A fence still open at
//     the run's end is a violation: past its bound it did not end, within it the run ended
//     before it could be judged.
//   - ReplicasReturn (e): every pod of Input.Pods has an accepted write after Input.Healed.
//   - CleanUnfence (f), invariant 5: the out-of-service taint leaves a node whose latest
//     NodeFence is Released or Recovered (a recovery: the node given back) only while the Node,
//     as its latest accepted write shows it, is Ready with a boot ID other than the one it
//     reported when that NodeFence was created. A fence disproved during its release (phase
//     Releasing) takes its own taint off, and that is no unfence. A run has no operator who
//     confirms a node clean by hand, so a reboot is the only proof of a clean node there is.
//   - AuditComplete: the audit log holds the creation of every pod UID that wrote and of every
//     NodeFence in Input.Fences, so that (b)–(d) cannot pass on a log that lost what they judge.
package checker
