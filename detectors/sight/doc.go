// Package sight tells whether the controller can see fresh signals at all (invariant 3). Its
// Tracker, run by the leader, writes a canary Lease in kube-node-lease every second and reads
// it back through the same watch as the node Leases: while the write fails or the watch does
// not show it fresh, or after the wall clock jumped, the controller is blind, and Since moves
// to the moment it sees again. The detectors count a Lease's age only from Since, so an outage
// of the API server or of the watch never looks like a node that stopped renewing.
package sight
