// Package observe is the detectors' façade: it composes the lease detector and, where node
// agents run, the classifier over their direct heartbeats and peer reports into one
// detectors.Observation per node. The fencing controllers ask it about nodes; they never read
// Leases or heartbeats themselves.
package observe
