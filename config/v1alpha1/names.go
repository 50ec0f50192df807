package v1alpha1

import "palisade.dev/palisade/config/names"

// Well-known annotations, labels and taints.
const (
	// AnnotationFenceRequest on a Node asks for that node to be fenced; its value is the reason,
	// a short printable text (1 to 256 characters).
	AnnotationFenceRequest = "palisade.dev/fence-request"
	// AnnotationFenceRequestedBy on a Node names the authenticated user who set or last changed
	// AnnotationFenceRequest. The chart's MutatingAdmissionPolicy writes it from the request's
	// userInfo, and its ValidatingAdmissionPolicy keeps anyone from setting or changing it on its
	// own; the controller records it as the NodeFence's spec.requestedBy.
	AnnotationFenceRequestedBy = "palisade.dev/fence-requested-by"
	// AnnotationUnfenceRequest on a Node whose fence was released confirms that the node is
	// clean (its workload's processes are gone: reinstalled, or checked by hand) when it has not
	// rebooted since the fence, or when Palisade holds it fenced for flapping; its value says
	// how it was made clean, 1 to 256 printable characters. Guarded like AnnotationFenceRequest:
	// the chart's admission policies let only fenceRequests' allowed users set it and record
	// who did in AnnotationUnfenceRequestedBy. Palisade removes both once the node is unfenced.
	AnnotationUnfenceRequest = "palisade.dev/unfence-request"
	// AnnotationUnfenceRequestedBy on a Node names the authenticated user who set or last
	// changed AnnotationUnfenceRequest, written by the chart's MutatingAdmissionPolicy.
	AnnotationUnfenceRequestedBy = "palisade.dev/unfence-requested-by"
	// AnnotationBMCAddress on a Node gives its BMC's address, "host" or "host:port".
	AnnotationBMCAddress = "palisade.dev/bmc-address"
	// AnnotationBMCSecret on a Node names a Secret (in the namespace of the policy's credentialsSecretRef) holding the
	// BMC's "username" and "password", overriding the policy's credentialsSecretRef.
	AnnotationBMCSecret = "palisade.dev/bmc-secret"
	// AnnotationRedfishSystem on a Node names its ComputerSystem (the system's Name) on a
	// Redfish BMC that has several; unset, the BMC's only system.
	AnnotationRedfishSystem = "palisade.dev/redfish-system"
	// AnnotationBMCIdentityCheck on a Node, "false", stops the IPMI and Redfish methods from
	// comparing the BMC's system GUID or UUID with the node's systemUUID before a power command:
	// for a BMC that is the node's own but reports another identity. Unset or "true" checks.
	AnnotationBMCIdentityCheck = "palisade.dev/bmc-identity-check"
	// AnnotationExecutorCommand on a NodeFence is the controller's order to the node's agent
	// when the order goes through the API server (a node whose kubelet is down but whose agent
	// sees the API server): the JSON of an agentwire Command (config/agentwire). The agent watches its own
	// node's NodeFence for it.
	AnnotationExecutorCommand = names.AnnotationExecutorCommand
	// AnnotationExecutorStatus on a NodeFence is the agent's answer to AnnotationExecutorCommand:
	// the JSON of an agentwire APIReport (the executor status and the runtime read-back).
	AnnotationExecutorStatus = names.AnnotationExecutorStatus
	// FinalizerFenceOnDelete on a Node that a FencingPolicy covers holds the Node's deletion
	// until Palisade has fenced it (trigger NodeDeleted) or confirmed that its machine no
	// longer exists. The controller adds and removes it; a person removes it by hand only for a
	// machine known to be off (see the README, "Deleting a node").
	FinalizerFenceOnDelete = "palisade.dev/fence-on-delete"
	// AnnotationStorageCIDRs on a Node lists, comma-separated, the CIDRs a storage fence
	// (method NetworkFence) fences for it, such as its address on the storage network
	// ("10.20.0.5/32,fd00:20::5/128"; none wider than a /24 or a /64, none holding another Node's
	// address); unset, its InternalIP and ExternalIP addresses.
	AnnotationStorageCIDRs = "palisade.dev/storage-cidrs"
	// AnnotationAgent on a Node, written by the controller (the RFC 3339 time of the look that
	// wrote it) once it has heard the node's agent, says the node runs a palisade-agent: a
	// controller that starts or takes over leadership, and has not heard that agent yet, weighs
	// it as silent while it may yet be heard, and counts it silent once it has listened three of
	// its heartbeat intervals and the node's kubelet renewed since (the AgentsSilent hold).
	// Given the agents' ServiceAccount (--agent-service-account, as the chart does), the hold
	// counts a marked node only while a pod of it is bound there; agents run otherwise, remove
	// it (`kubectl annotate node <name> palisade.dev/agent-`) from a node that no longer runs
	// one. Uninstalling Palisade removes it.
	AnnotationAgent = "palisade.dev/agent"
	// FinalizerLiftStorageFence on a NodeFence whose method put up a storage fence holds the
	// NodeFence's deletion until that fence is lifted: once the node no longer carries the
	// out-of-service taint this fence added (the node is repaired), or at once when the fence
	// failed before it released anything. A fence that failed after it had force-deleted pods
	// or released attachments (its node showed life, and a taint the fence added was taken back), and a node
	// that no longer exists (its machine may still run with those addresses), keep their
	// storage fence, and the finalizer goes with a warning event.
	FinalizerLiftStorageFence = "palisade.dev/lift-storage-fence"
	// LabelNode on a NodeFence names the node it fences, when the name fits a label value (63
	// characters; a node name may have 253).
	LabelNode = "palisade.dev/node"

	// TaintOutOfService is the KEP-2268 taint that lets Kubernetes release a shut-down node.
	TaintOutOfService = "node.kubernetes.io/out-of-service"
	// TaintOutOfServiceValue is the value Kubernetes documents for TaintOutOfService.
	TaintOutOfServiceValue = "nodeshutdown"
)
