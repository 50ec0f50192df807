// Package detectors turns signals about a node into an Observation: a Verdict (Healthy,
// Suspect, KubeletDown, Partitioned, Dead), the time of the last fresh signal and a reason a
// person can read. Detectors only observe; the fencing package decides what to do. Sub-packages
// hold one detector each (lease: the API server's view through the node's Lease).
package detectors
