// Package testbed runs a real Kubernetes control plane for tests, the demo and the benchmarks:
// etcd and kube-apiserver (driven by controller-runtime's envtest, which also installs
// Palisade's CRDs), plus kube-controller-manager and kube-scheduler launched as child
// processes, so that Palisade is measured against what a cluster really does (node lifecycle,
// taint eviction, PodGC, attach/detach, StatefulSets, scheduling). Unless
// Options.NoCSIAttacher, the real CSI external-attacher runs too, as a child process in front
// of package csidriver's plugin (a stand-in for a storage backend, served in-process), so that
// the VolumeAttachments of CSIDriverName's volumes are attached and detached as in a cluster.
// With Options.CSIAddons, the real csi-addons manager and sidecar (kubernetes-csi-addons) run
// too, in front of package csiaddonsdriver's stand-in storage driver, so that NetworkFences are
// carried out as in a cluster (the sidecar in a mount namespace of its own, where its
// ServiceAccount token appears at the in-cluster path: see csiaddons.go).
// The binaries are built from the Go module proxy by `make testbed` and found through
// $PALISADE_TESTBED_BIN; Start fails, rather than skipping, when they are missing. No kubelet
// runs here: see package simnode for the simulated nodes. Every process started by a Cluster
// writes its log under Cluster.Dir and is gone once Stop returns.
package testbed
