// Package scale measures the cost of watching thousands of nodes (make bench-scale): the real
// palisade-controller, built and run as its own process so that its RSS and CPU are its own,
// against the test bed's real API server, with N simulated nodes (Node objects Ready and their
// kube-node-lease Leases renewed every 10 s, spread over the interval, like a kubelet's: one
// PUT a renewal from the copy it last wrote), 30 pods per node (bound, status Running) and one
// simulated agent per node heartbeating at 1 s over real mTLS with the real agent client
// (providers/agent/channel).
//
// Simulated, and why: the nodes and agents are loops, because thousands of real kubelets or
// agent processes do not fit on the 2 cores this runs on and are not what is measured. The
// test bed's kube-controller-manager runs without nodelifecycle and podgc so that the load and
// every release measured are Palisade's own.
package scale
