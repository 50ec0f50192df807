// Package e2e holds the end-to-end fencing tests: the real etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler, simulated nodes driven by real ipmi_sim BMCs,
// and Palisade's controller, all in one process tree (see test/scenario).
package e2e
