// Package realscene builds the test bed's scene on real machines: the control plane with its
// audit log, a LAN with N machines (package machine: real kubelets, containerd and runc, power
// from ipmi_sim BMCs whose addresses the Nodes carry), a "storage" namespace holding the witness
// store, the witness StatefulSet whose replicas write to it, Palisade's policy and its
// controller as real processes with leader election — and reads back the records the checker
// judges. The e2e tests on real machines and the chaos runs share it.
package realscene
