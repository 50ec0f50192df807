// Package peers is the node agent's view of its peers: the Prober probes the peers the
// controller assigns, every interval, and keeps the latest result of each for the heartbeats
// (a node cut off from the control plane but not from its peers is not isolated). A peer's agent
// answers with a TLS handshake that presents its own certificate (ProbeServer), which the prober
// checks names that very node (ProbeDialer); its kubelet's port counts too.
package peers
