// Package classify combines a node's independent signals into one Observation. The signals are
// the API server's view (the lease detector's Observation of the node's Lease), the direct
// heartbeat of the node's agent to the controller (which carries the agent's view of its
// kubelet), and the reachability reports of the node's peers. Classify is pure: the caller
// gathers the signals and the clock reading, and gets back a Verdict with a Reason that names
// every signal it rests on.
//
// A stale Lease alone never makes a node Dead while another path still sees it alive (safety
// invariant 4): fresh agent heartbeats make it KubeletDown or Partitioned, and so does a fresh
// peer report that reaches it; only when every path is silent is it Dead. A node that never ran
// an agent falls back to the Lease, and the Reason says so.
//
// Ring picks the peers each agent probes: every node probes the k nodes after it on a hash
// ring, so every node is probed by exactly k others (when there are more than k nodes), the work
// per node stays constant at any cluster size, and a node joining or leaving changes the targets
// of only k nodes.
package classify
