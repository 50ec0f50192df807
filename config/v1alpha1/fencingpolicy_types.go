package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MethodType names a fencing method.
// +kubebuilder:validation:Enum=IPMI;Redfish;AWS;VSphere;Executor;SelfFence;NetworkFence;StorageGateway
type MethodType string

const (
	// MethodIPMI powers the node off through its BMC over IPMI (bmclib's ipmitool provider) and
	// confirms by reading the chassis power state back.
	MethodIPMI MethodType = "IPMI"
	// MethodRedfish powers the node off through its BMC over Redfish (bmclib's Redfish
	// provider: ComputerSystem.Reset with ForceOff) and confirms by reading the system's
	// PowerState back.
	MethodRedfish MethodType = "Redfish"
	// MethodAWS stops the node's EC2 instance, named by its spec.providerID, with
	// StopInstances and Force (no OS shutdown), and confirms by DescribeInstances reading it
	// stopped (or terminated: nothing is left to run the workload).
	MethodAWS MethodType = "AWS"
	// MethodVSphere powers off the node's virtual machine, found by its spec.providerID
	// (vsphere://<BIOS UUID>), through vCenter's API (govmomi) and confirms by reading the VM's
	// power state back as poweredOff.
	MethodVSphere MethodType = "VSphere"
	// MethodExecutor has the node's agent stop the kubelet and terminate every workload
	// container as the kubelet would, then confirms from the agent's read-back that none runs.
	// It needs a reachable agent, so it is skipped for a node with no signal on any path (Dead).
	MethodExecutor MethodType = "Executor"
	// MethodSelfFence relies on the node's agent fencing itself: an agent cut off from the
	// controller, the API server (counted reachable only while its kubelet is healthy) and every
	// peer (counted reachable only when the peer's agent acknowledges its probe, which the peer
	// reports) for longer than its --self-fence-after terminates its workload (and reboots through
	// its watchdog when configured). The controller counts the node fenced only once it has had
	// no signal from it on any path for safeAfter since the wait began, and no other node's
	// agent is silent too (nodes cut off together may reach each other, and then do not fence
	// themselves: OtherAgentsSilent), and records that it relied on it.
	MethodSelfFence MethodType = "SelfFence"
	// MethodNetworkFence fences the node at its storage through csi-addons: a NetworkFence
	// (csiaddons.openshift.io/v1alpha1) for the node's addresses with the method's
	// NetworkFenceClass, whose CSI driver has the storage refuse them; confirmed only when the
	// NetworkFence's status says the fence Succeeded. The node itself may go on running, cut
	// off from its volumes. The fence stays until the NodeFence is deleted after the node's
	// repair (its out-of-service taint removed): then it is lifted and read back before the
	// NodeFence goes.
	MethodNetworkFence MethodType = "NetworkFence"
	// MethodStorageGateway fences the node at its storage hosts: each of the method's storage
	// gateways (palisade-agent gateway, on an NFS or iSCSI server) rejects every packet from
	// the node's addresses with nftables, under the fence's token, and confirms by reading its
	// ruleset back. Lifted as a NetworkFence is, under a newer token, so that a replayed fence
	// command is refused.
	MethodStorageGateway MethodType = "StorageGateway"
)

// The SelfFence timeout rule sits on the policy, not on Method, which NodeFence copies: a
// NodeFence copied from a policy stored before the rule must still be created.

// FencingPolicySpec says which nodes a policy covers, when one counts as failed, how it is
// fenced and what is released once the fence is confirmed.
// +kubebuilder:validation:XValidation:rule="self.methods.map(m, m.name).all(n, self.methods.filter(m, m.name == n).size() == 1)",message="spec.methods: every method needs a unique name"
// +kubebuilder:validation:XValidation:rule="!has(self.nodeSelector) || !has(self.nodeSelector.matchExpressions) || self.nodeSelector.matchExpressions.all(e, e.operator in ['In', 'NotIn'] ? (has(e.values) && size(e.values) > 0) : (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))",message="spec.nodeSelector.matchExpressions: each operator must be In or NotIn with at least one value, or Exists or DoesNotExist with none"
// +kubebuilder:validation:XValidation:rule="self.methods.all(m, m.type != 'SelfFence' || !has(m.selfFence) || duration(m.selfFence.safeAfter) < (has(m.timeout) ? duration(m.timeout) : duration('60s')))",message="spec.methods: a SelfFence method's timeout (default 60s, counted from the wait's start) must exceed selfFence.safeAfter, or the method can only time out (MethodTimedOut): raise timeout or lower safeAfter"
type FencingPolicySpec struct {
	// NodeSelector picks the nodes this policy covers. Empty selects every node.
	// +optional
	NodeSelector metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// Detection says when a node counts as failed.
	// +optional
	Detection Detection `json:"detection,omitempty"`

	// Methods is the escalation chain: each method is tried in order until one is confirmed;
	// a method that fails or times out hands over to the next. Methods that share a level
	// are taken one after another, where the level's first method is listed, and must all be
	// confirmed before the node counts as fenced; when one of them fails, the chain goes on with
	// the next level.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	Methods []Method `json:"methods"`

	// StormGuard stops all automatic fencing when too many of the policy's nodes look failed or
	// late (Suspect) at once: then the controller is more likely the one cut off than the nodes.
	// +optional
	StormGuard StormGuard `json:"stormGuard,omitempty"`

	// Release says what is released once a fence is confirmed.
	// +optional
	Release Release `json:"release,omitempty"`

	// Workloads limits automatic fencing to the nodes that hold a pod that needs it (the 2016
	// Pod Safety proposal: fence for the pods that cannot be replaced without it). Unset, every
	// failed node of the policy is fenced.
	// +optional
	Workloads *Workloads `json:"workloads,omitempty"`

	// Recovery says when a released node is given back to the cluster (invariant 5: only a
	// clean node is unfenced).
	// +optional
	Recovery Recovery `json:"recovery,omitempty"`

	// DryRun records and reports every decision but takes no fencing or release step.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
}

// Workloads names the pods a fence is for. A failed node is fenced automatically only when
// one of the pods bound to it is of one of the kinds listed; a node holding none is left to
// Kubernetes, which replaces such pods once the node is NotReady, and Palisade says so in an
// event. Manual requests and node deletions are fenced whatever it says.
// +kubebuilder:validation:XValidation:rule="self.rwoVolumes || self.statefulSets || has(self.podSelector)",message="workloads needs at least one of rwoVolumes, statefulSets, podSelector (or leave workloads out to fence every failed node)"
// +kubebuilder:validation:XValidation:rule="!has(self.podSelector) || !has(self.podSelector.matchExpressions) || self.podSelector.matchExpressions.all(e, e.operator in ['In', 'NotIn'] ? (has(e.values) && size(e.values) > 0) : (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))",message="workloads.podSelector.matchExpressions: each operator must be In or NotIn with at least one value, or Exists or DoesNotExist with none"
type Workloads struct {
	// RWOVolumes: pods with a PersistentVolumeClaim that only one node may attach
	// (ReadWriteOnce or ReadWriteOncePod): its volume stays attached to the failed node.
	// +optional
	RWOVolumes bool `json:"rwoVolumes,omitempty"`
	// StatefulSets: pods a StatefulSet owns, which it never replaces while the old one may run.
	// +optional
	StatefulSets bool `json:"statefulSets,omitempty"`
	// PodSelector: pods with these labels, in any namespace.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
}

// Recovery says when a node whose fence was released is unfenced: its out-of-service taint
// removed, its storage fences lifted, its NodeFence ended as Recovered. A node is unfenced only
// when it is back (Ready) and clean: rebooted since the fence (its boot ID changed), or
// confirmed clean by an operator through the palisade.dev/unfence-request annotation.
// +kubebuilder:validation:XValidation:rule="!has(self.flapWindow) || (duration(self.flapWindow) >= duration('0s') && duration(self.flapWindow) <= duration('168h'))",message="recovery.flapWindow must be between 0s and 168h"
type Recovery struct {
	// Automatic unfences a node that is back and rebooted on its own. false: only an operator's
	// palisade.dev/unfence-request unfences. Default true.
	// +optional
	Automatic *bool `json:"automatic,omitempty"`
	// PowerOn powers the node back on through the power method that fenced it once its fence is
	// released (as Metal3 and Pacemaker can), so that it reboots and comes back clean on its
	// own. Default false: the machine stays off until someone repairs it.
	// +optional
	PowerOn bool `json:"powerOn,omitempty"`
	// FlapWindow: a node fenced again within this time of its previous recovery flaps, and is
	// not unfenced automatically on its next return: it is held fenced and reported until an
	// operator confirms it clean. Default 1h; 0s never holds.
	// +optional
	FlapWindow *metav1.Duration `json:"flapWindow,omitempty"`
}

// Detection holds the thresholds of the detectors.
// +kubebuilder:validation:XValidation:rule="!has(self.leaseTimeout) || duration(self.leaseTimeout) >= duration('2s')",message="spec.detection.leaseTimeout must be at least 2s (a node whose kubelet renews its Lease less often than every half of it is judged with two of its renewal intervals: 20s for the default 10s)"
// +kubebuilder:validation:XValidation:rule="!has(self.leaseTimeout) || duration(self.leaseTimeout) <= duration('1h')",message="spec.detection.leaseTimeout must be at most 1h"
// +kubebuilder:validation:XValidation:rule="!has(self.heartbeatInterval) || (duration(self.heartbeatInterval) >= duration('100ms') && duration(self.heartbeatInterval) <= duration('1m'))",message="detection.heartbeatInterval must be between 100ms and 1m"
type Detection struct {
	// LeaseTimeout is how long a node's Lease in kube-node-lease may go without renewal before
	// the node counts as failed. Default 20s. A node whose kubelet renews its Lease less often
	// than every half of it (every quarter of nodeLeaseDurationSeconds: 10s by default) is
	// judged with two of its renewal intervals instead, since a shorter timeout would count a
	// kubelet renewing on time as failed; the condition LeaseTimeoutRaised says so.
	// +optional
	LeaseTimeout *metav1.Duration `json:"leaseTimeout,omitempty"`
	// HeartbeatInterval is how often the agents of the policy's nodes send their heartbeats
	// straight to the controller and probe their peers; the controller tells each agent in
	// its answers. An agent counts as lost after 3 missed intervals, so this sets how fast a
	// dead node's silence is noticed; before its Lease expires, the node is Dead once its peers
	// cannot reach it either and its kubelet has missed a Lease renewal. Default 1s.
	// +optional
	HeartbeatInterval *metav1.Duration `json:"heartbeatInterval,omitempty"`
}

// Method is one step of the escalation chain.
// +kubebuilder:validation:XValidation:rule="self.type != 'IPMI' || has(self.ipmi)",message="a method of type IPMI needs its ipmi settings (credentialsSecretRef)"
// +kubebuilder:validation:XValidation:rule="self.type != 'Redfish' || has(self.redfish)",message="a method of type Redfish needs its redfish settings (credentialsSecretRef)"
// +kubebuilder:validation:XValidation:rule="self.type != 'VSphere' || has(self.vsphere)",message="a method of type VSphere needs its vsphere settings (server, credentialsSecretRef)"
// +kubebuilder:validation:XValidation:rule="self.type != 'NetworkFence' || has(self.networkFence)",message="a method of type NetworkFence needs its networkFence settings (networkFenceClassName)"
// +kubebuilder:validation:XValidation:rule="self.type != 'StorageGateway' || has(self.storageGateway)",message="a method of type StorageGateway needs its storageGateway settings (gateways, tlsSecretRef)"
// +kubebuilder:validation:XValidation:rule="self.type != 'SelfFence' || has(self.selfFence)",message="a method of type SelfFence needs selfFence.safeAfter: how long after the last signal the node's agent has surely fenced itself"
// +kubebuilder:validation:XValidation:rule="!has(self.timeout) || (duration(self.timeout) >= duration('1s') && duration(self.timeout) <= duration('30m'))",message="a method's timeout must be between 1s and 30m"
type Method struct {
	// Name identifies the method in NodeFence records and events.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Type is the kind of fence.
	Type MethodType `json:"type"`

	// Level groups this method with the other methods of the same level: the node counts as
	// fenced only once every method of the level is confirmed (for example a storage fence AND
	// a power-off), as Pacemaker's fencing topology does. The level is taken where its first
	// method is listed, its methods in the order listed, each within its own timeout; when one
	// fails, the rest of its level is skipped and the next level (or method) is taken. Unset:
	// the method is a level of its own.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Level string `json:"level,omitempty"`

	// Timeout bounds the method, from its first command to a confirmed fence. Default 60s.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// IPMI configures a method of type IPMI.
	// +optional
	IPMI *IPMIMethod `json:"ipmi,omitempty"`

	// Redfish configures a method of type Redfish.
	// +optional
	Redfish *RedfishMethod `json:"redfish,omitempty"`

	// AWS configures a method of type AWS (optional: the defaults take the region from the
	// node's providerID and the credentials from the SDK's default chain).
	// +optional
	AWS *AWSMethod `json:"aws,omitempty"`

	// VSphere configures a method of type VSphere.
	// +optional
	VSphere *VSphereMethod `json:"vsphere,omitempty"`

	// Executor configures a method of type Executor.
	// +optional
	Executor *ExecutorMethod `json:"executor,omitempty"`

	// SelfFence configures a method of type SelfFence.
	// +optional
	SelfFence *SelfFenceMethod `json:"selfFence,omitempty"`

	// NetworkFence configures a method of type NetworkFence.
	// +optional
	NetworkFence *NetworkFenceMethod `json:"networkFence,omitempty"`

	// StorageGateway configures a method of type StorageGateway.
	// +optional
	StorageGateway *StorageGatewayMethod `json:"storageGateway,omitempty"`
}

// StorageGatewayMethod configures a storage fence through Palisade's storage gateways. The
// fenced addresses are the node's annotation palisade.dev/storage-cidrs (single addresses,
// /32 or /128) when set, else its InternalIP and ExternalIP addresses.
type StorageGatewayMethod struct {
	// Gateways are the storage gateways' addresses, "host:port": every one of them must confirm
	// the fence.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^([^\s/:\[\]]+|\[[0-9a-fA-F:.]+\]):[0-9]{1,5}$`
	// +listType=atomic
	Gateways []string `json:"gateways"`
	// TLSSecretRef names a Secret with keys "ca.crt" (the CA the gateways' certificates chain
	// to), "tls.crt" and "tls.key" (the controller's client certificate, which the gateways
	// require).
	TLSSecretRef SecretReference `json:"tlsSecretRef"`
}

// NetworkFenceMethod configures a storage fence through csi-addons. The fenced CIDRs are the
// node's annotation palisade.dev/storage-cidrs when set (its addresses on the storage network),
// else each of its InternalIP and ExternalIP addresses (/32 or /128).
type NetworkFenceMethod struct {
	// NetworkFenceClassName names the csi-addons NetworkFenceClass: its provisioner is the CSI
	// driver that fences, its parameters the driver's (and the Secret it needs).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NetworkFenceClassName string `json:"networkFenceClassName"`
}

// SelfFenceMethod configures reliance on the agents' self-fencing.
// +kubebuilder:validation:XValidation:rule="duration(self.safeAfter) >= duration('1s')",message="selfFence.safeAfter must be at least 1s, and should exceed the agents' --self-fence-after plus four heartbeat intervals plus the longest grace period"
type SelfFenceMethod struct {
	// SafeAfter is how long after the wait for the node's isolation began (the node silent on
	// every path) its agent has surely terminated its workload: more than the agents'
	// --self-fence-after plus four heartbeat intervals (an acknowledged peer probe counts as a
	// path for two, the agent looks once per interval, a peer reports once per interval) plus
	// the longest grace period of its pods. The method's timeout (default 60s, counted from the
	// wait's start) must exceed safeAfter: the API server refuses a policy where it does not.
	SafeAfter metav1.Duration `json:"safeAfter"`
}

// ExecutorMethod configures the node-side termination executor.
type ExecutorMethod struct {
	// GracePeriodSeconds caps every pod's grace period; unset keeps each pod's own (the
	// kubelet's rules: deletion grace, else the pod's, else 30s; at least 2s per container).
	// +kubebuilder:validation:Minimum=0
	// +optional
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
}

// IPMIMethod configures IPMI power fencing. The BMC address of each node is its annotation
// palisade.dev/bmc-address ("host" or "host:port"; port 623 by default).
type IPMIMethod struct {
	// CredentialsSecretRef names the Secret with keys "username" and "password". A node's
	// annotation palisade.dev/bmc-secret names another Secret in the same namespace for it.
	CredentialsSecretRef SecretReference `json:"credentialsSecretRef"`

	// CipherSuite is the IPMI v2.0 cipher suite (ipmitool -C). Default 3.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=17
	// +optional
	CipherSuite *int32 `json:"cipherSuite,omitempty"`
}

// RedfishMethod configures Redfish power fencing. The BMC address of each node is its
// annotation palisade.dev/bmc-address ("host" or "host:port"; port 443 by default), its system
// the one named by its annotation palisade.dev/redfish-system, or the only system the BMC has.
type RedfishMethod struct {
	// CredentialsSecretRef names the Secret with keys "username" and "password". A node's
	// annotation palisade.dev/bmc-secret names another Secret in the same namespace for it.
	CredentialsSecretRef SecretReference `json:"credentialsSecretRef"`

	// CABundleSecretRef names a Secret whose key "ca.crt" holds the PEM certificates of the CAs
	// that sign the BMCs' certificates. Unset: the controller's system CAs.
	// +optional
	CABundleSecretRef *SecretReference `json:"caBundleSecretRef,omitempty"`

	// InsecureSkipVerify skips the verification of the BMCs' certificates: anyone on the path
	// could then take the credentials and answer for the BMC. The policy carries a warning
	// condition while a method says so.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`

	// BasicAuth sends the credentials with every request instead of opening a Redfish session
	// (for BMCs whose session service is broken).
	// +optional
	BasicAuth bool `json:"basicAuth,omitempty"`
}

// AWSMethod configures EC2 power fencing. The instance is the node's spec.providerID,
// "aws:///<zone>/<instance-id>".
type AWSMethod struct {
	// CredentialsSecretRef names a Secret with keys "accessKeyID" and "secretAccessKey" (and
	// "sessionToken" for temporary keys). Unset: the AWS SDK's default chain (IRSA's web
	// identity token, the environment, the instance profile).
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`

	// Region overrides the region taken from the zone of the node's providerID.
	// +kubebuilder:validation:Pattern=`^[a-z]{2}(-[a-z]+)+-[0-9]+$`
	// +optional
	Region string `json:"region,omitempty"`

	// Endpoint is the EC2 endpoint URL to use instead of the region's (a VPC endpoint, another
	// partition, tests).
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// ForceDetachVolumes adds a release step, DetachVolumes, once this method's fence is
	// confirmed and the node's pods are deleted: the EBS volumes of the node's
	// VolumeAttachments being released (volume handles "vol-…", as the EBS CSI driver's and
	// in-tree IDs are) are detached from the stopped instance with Force (DetachVolume) and
	// read back before the attachments are released, so that the volumes attach elsewhere at
	// once even when the instance is impaired. No other volume is detached: not the root,
	// not the node's own data volume, not the volume of a pod that stays on the node. Needs
	// ec2:DescribeVolumes and ec2:DetachVolume.
	// +optional
	ForceDetachVolumes bool `json:"forceDetachVolumes,omitempty"`
}

// VSphereMethod configures vSphere power fencing. The VM is the node's spec.providerID,
// "vsphere://<BIOS UUID>".
type VSphereMethod struct {
	// Server is vCenter's (or the ESXi host's) address, "host" or "host:port" (443 by default),
	// without a scheme or a path.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^([^\s/:\[\]]+|\[[0-9a-fA-F:.]+\])(:[0-9]{1,5})?$|^[0-9a-fA-F.]*:[0-9a-fA-F:.]*$`
	Server string `json:"server"`

	// CredentialsSecretRef names the Secret with keys "username" and "password".
	CredentialsSecretRef SecretReference `json:"credentialsSecretRef"`

	// CABundleSecretRef names a Secret whose key "ca.crt" holds the PEM certificates of the CAs
	// that sign vCenter's certificate. Unset: the controller's system CAs.
	// +optional
	CABundleSecretRef *SecretReference `json:"caBundleSecretRef,omitempty"`

	// InsecureSkipVerify skips the verification of vCenter's certificate; the policy carries
	// a warning condition while a method says so.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// SecretReference names a Secret.
type SecretReference struct {
	// Name is the Secret's name: a DNS subdomain (lower case).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Namespace is the Secret's namespace: a DNS label (lower case).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
}

// StormGuard bounds automatic fencing.
// A count is bounded: the controller reads it as a 32-bit integer, and a policy it cannot read
// would stop it from reading every policy.
// +kubebuilder:validation:XValidation:rule="!has(self.maxUnhealthy) || (type(self.maxUnhealthy) == int ? self.maxUnhealthy >= 0 && self.maxUnhealthy <= 1000000 : self.maxUnhealthy.matches('^(100|[1-9]?[0-9])%$'))",message="spec.stormGuard.maxUnhealthy must be a count (0 to 1000000) or a percentage from 0% to 100%"
type StormGuard struct {
	// MaxUnhealthy is the most nodes of the policy that may look failed or late (Suspect) at
	// once (a count, or a percentage of the policy's nodes, rounded down but at least one
	// unless it is 0%) for fencing to go on. 0 and 0% fence nothing automatically.
	// Default "40%".
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`
}

// Release says what a confirmed fence releases. Every field defaults to true.
// +kubebuilder:validation:XValidation:rule="!has(self.verifyWindow) || (duration(self.verifyWindow) >= duration('0s') && duration(self.verifyWindow) <= duration('10m'))",message="release.verifyWindow must be between 0s and 10m"
type Release struct {
	// OutOfServiceTaint adds node.kubernetes.io/out-of-service=nodeshutdown:NoExecute.
	// +optional
	OutOfServiceTaint *bool `json:"outOfServiceTaint,omitempty"`
	// DeletePods force-deletes the pods still bound to the node (those that tolerate the
	// out-of-service taint are left alone, as Kubernetes does).
	// +optional
	DeletePods *bool `json:"deletePods,omitempty"`
	// ReleaseAttachments deletes the node's VolumeAttachments.
	// +optional
	ReleaseAttachments *bool `json:"releaseAttachments,omitempty"`
	// VerifyWindow is how long the node's own signals (its Lease, its agent's heartbeats, its
	// peers' probes) are watched after a fence is confirmed before anything is released; a
	// signal in that time fails the method and nothing is released. Counted from the
	// confirmation. Default: until one Lease renewal interval of the node's kubelet (a quarter
	// of the Lease's leaseDurationSeconds, 10s for the kubelet's default) plus the renewal
	// margin (1s, or twice how late renewals have come lately on a loaded API server) after
	// the controller first saw the node's last renewal, and at least three of its agent's
	// heartbeat intervals plus 1s after the controller last heard the agent or a peer reach
	// the node (or after the confirmation, when that is earlier or the agent was never heard);
	// at most the renewal interval plus the margin after the confirmation. For a node silent on every
	// path long enough before its fence, the default window may have ended before the
	// confirmation: its signals are then checked once, at the confirmation. 0 checks once,
	// without waiting. A method that leaves the node running with its kubelet not stopped (the
	// Executor) is watched at least as long as the kubelet could restart the workload (up to
	// its longest crash back-off plus 1s), whatever this says.
	// +optional
	VerifyWindow *metav1.Duration `json:"verifyWindow,omitempty"`
}

// FencingPolicyStatus reports what the policy sees.
type FencingPolicyStatus struct {
	// ObservedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Nodes is how many nodes the policy covers.
	// +optional
	Nodes int32 `json:"nodes"`
	// UnhealthyNodes is how many of them look failed or late (Suspect) now.
	// +optional
	UnhealthyNodes int32 `json:"unhealthyNodes"`
	// Unhealthy lists the nodes that look failed or late, with the detectors' verdict and why
	// (at most MaxUnhealthyListed, by name).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	Unhealthy []NodeVerdict `json:"unhealthy,omitempty"`
	// Conditions: StormGuardActive, ControllerBlind, InsecureTLS, InvalidSpec.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// NodeSelector is the node selector in force, as kubectl's -l takes one ("" selects every
	// node): spec.nodeSelector as the controller last parsed it. While spec.nodeSelector does
	// not parse (InvalidSpec, NodeSelectorInvalid) the policy goes on covering the nodes this
	// one selects, so that a broken edit moves no node to another policy, or to none. Unset
	// until the spec's first parses.
	// +optional
	NodeSelector *string `json:"nodeSelector,omitempty"`
}

// MaxUnhealthyListed bounds FencingPolicyStatus.Unhealthy.
const MaxUnhealthyListed = 50

// NodeVerdict is the detectors' view of one node.
type NodeVerdict struct {
	Node string `json:"node"`
	// Verdict: Suspect, KubeletDown, Partitioned or Dead.
	Verdict string `json:"verdict"`
	// Reason says which signals led there.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
}

// FencingPolicy selects nodes and says how Palisade fences them.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=fp
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="Unhealthy",type=integer,JSONPath=`.status.unhealthyNodes`
// +kubebuilder:printcolumn:name="Methods",type=string,JSONPath=`.spec.methods[*].name`
// +kubebuilder:printcolumn:name="Dry-Run",type=boolean,JSONPath=`.spec.dryRun`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FencingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FencingPolicySpec   `json:"spec"`
	Status FencingPolicyStatus `json:"status,omitempty"`
}

// FencingPolicyList is a list of FencingPolicy.
// +kubebuilder:object:root=true
type FencingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FencingPolicy `json:"items"`
}
