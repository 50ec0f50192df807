package machine

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"palisade.dev/palisade/test/testbed/containerd"
)

// Files of a machine, under its directory. disk/ survives a power cut like a disk; run/ is
// wiped at every boot like a tmpfs.
const (
	etcDir     = "etc"
	diskDir    = "disk"
	runDir     = "run"
	logDir     = "log"
	bootIDFile = "boot_id"
)

func (m *Machine) path(parts ...string) string {
	return filepath.Join(append([]string{m.dir}, parts...)...)
}

func (m *Machine) socket() string { return m.path(runDir, "containerd.sock") }

// PodSubnet is the machine's pod network: one /24 per machine index.
func (m *Machine) PodSubnet() string { return fmt.Sprintf("10.88.%d.0/24", m.o.Index) }

// writeConfig writes containerd's, the CNI's and the kubelet's configuration and the
// kubelet's kubeconfig.
func (m *Machine) writeConfig() error {
	for _, d := range []string{etcDir, filepath.Join(etcDir, "cni"), diskDir, runDir, logDir} {
		if err := os.MkdirAll(m.path(d), 0o755); err != nil {
			return fmt.Errorf("writing the configuration of machine %s: %w", m.o.Name, err)
		}
	}
	files := map[string]string{
		m.path(etcDir, "containerd.toml"):            containerd.Config(m.path(diskDir, "containerd"), m.socket(), m.path(etcDir, "cni")),
		m.path(etcDir, "cni", "10-machine.conflist"): m.cniConfig(),
		m.path(etcDir, "kubelet.yaml"):               m.kubeletConfig(),
	}
	for p, data := range files {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			return fmt.Errorf("writing the configuration of machine %s: %w", m.o.Name, err)
		}
	}
	return nil
}

// cniConfig is a bridge with host-local addresses: each machine its own bridge name and
// subnet, the machine as the pods' gateway.
func (m *Machine) cniConfig() string {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "machine",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": fmt.Sprintf("cni%d", m.o.Index), "isGateway": true, "ipMasq": false,
				"ipam": map[string]any{
					"type": "host-local", "dataDir": m.path(runDir, "cni-ipam"),
					"ranges": []any{[]any{map[string]any{"subnet": m.PodSubnet()}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return string(b)
}

// kubeletConfig is the KubeletConfiguration TESTBED.md found to work on this kernel (cgroup
// v1, no swap accounting, no per-QoS cgroups), with everything the kubelet writes kept under
// the machine's directory and eviction thresholds low enough that a full test disk does not
// evict the workload.
func (m *Machine) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
localStorageCapacityIsolation: false
resolvConf: ""
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
readOnlyPort: 0
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
%s%s`, m.socket(), m.path(diskDir, "pod-logs"), m.clusterDNS(), m.o.Kubelet.config())
}

// KubeletTuning is what operators who want fast failovers tune in their kubelets; zero fields
// keep the kubelet's defaults.
type KubeletTuning struct {
	// NodeStatusUpdateFrequency is how often the kubelet computes its node status and posts
	// it when it changed (default 10s): a volume a new pod needs is mounted only after the
	// status that reports it in use.
	NodeStatusUpdateFrequency time.Duration
	// NodeLeaseDurationSeconds is its Lease's duration (default 40); the kubelet renews the
	// Lease every quarter of it.
	NodeLeaseDurationSeconds int32
	// FeatureGates are the kubelet's featureGates (e.g. ContainerStopSignals, alpha in 1.37).
	FeatureGates map[string]bool
}

// config is the KubeletConfiguration lines of the tuning.
func (k KubeletTuning) config() string {
	var b strings.Builder
	if k.NodeStatusUpdateFrequency > 0 {
		// Set explicitly, the update frequency would become the report frequency too (a
		// status posted every time, changed or not): posted on change, and every 5m.
		fmt.Fprintf(&b, "nodeStatusUpdateFrequency: %s\nnodeStatusReportFrequency: 5m\n", k.NodeStatusUpdateFrequency)
	}
	if k.NodeLeaseDurationSeconds > 0 {
		fmt.Fprintf(&b, "nodeLeaseDurationSeconds: %d\n", k.NodeLeaseDurationSeconds)
	}
	if len(k.FeatureGates) > 0 {
		b.WriteString("featureGates:\n")
		for _, name := range slices.Sorted(maps.Keys(k.FeatureGates)) {
			fmt.Fprintf(&b, "  %s: %t\n", name, k.FeatureGates[name])
		}
	}
	return b.String()
}

// clusterDNS is the kubelet configuration's cluster DNS lines, none without Options.ClusterDNS.
func (m *Machine) clusterDNS() string {
	if m.o.ClusterDNS == "" {
		return ""
	}
	return fmt.Sprintf("clusterDNS: [%q]\nclusterDomain: cluster.local\n", m.o.ClusterDNS)
}
