// Package csiaddonsdriver is a stand-in CSI-Addons driver for the test bed: it serves the
// CSI-Addons Identity and FenceController services (github.com/csi-addons/spec) over a unix
// socket and keeps, in memory, the set of CIDRs it has fenced, as a storage backend keeps its
// blocklist. It exists because no CSI driver with a CSI-Addons NetworkFence service (Ceph-CSI
// and its Ceph cluster, for one) can be installed here. Everything in front of it is real: the
// csi-addons sidecar connects to its socket and the csi-addons manager reconciles NetworkFence
// objects through that sidecar, so a NetworkFence goes through the same path as in a cluster
// up to the storage call. The driver records every fence and unfence call (CIDRs, and the keys
// of the parameters and secrets it was given, never the secret values) and can be told to
// refuse them, as a storage backend that is down or says no.
package csiaddonsdriver
