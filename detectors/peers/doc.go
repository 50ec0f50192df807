// Package peers is the node agent's view of its peers: the Prober probes the peers the
// controller assigns, every interval, and keeps the latest result of each for the heartbeats
// (a node cut off from the control plane but not from its peers is not isolated). A peer's agent
// answers with a TLS handshake that presents its own certificate (ProbeServer), which the prober
// checks names that very node (ProbeDialer); its kubelet's port counts too. The prober presents
// its own agent certificate, and the peer's agent records it and acknowledges (ProbedBy, carried
// in its heartbeats): the controller's sight of the path from the prober to that peer. Only such
// acknowledged probes count as a path for the prober's self-fence (AnyAcknowledged).
package peers
