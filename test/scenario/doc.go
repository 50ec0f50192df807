// Package scenario builds the failover scene every end-to-end test, the demo and the benchmark
// share: the real control plane (test/testbed), simulated nodes each driven by its own ipmi_sim
// BMC, a FencingPolicy, a one-replica StatefulSet whose RWO volume is attached to node 1, and
// optionally Palisade's controller running in-process. A Tracker records, from the outside, when
// each milestone of a failover happens.
package scenario
