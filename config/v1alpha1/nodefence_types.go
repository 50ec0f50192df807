package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Trigger says why a NodeFence exists.
// +kubebuilder:validation:Enum=Detected;Manual;NodeDeleted
type Trigger string

const (
	// TriggerDetected: a detector found the node failed.
	TriggerDetected Trigger = "Detected"
	// TriggerManual: someone asked through the palisade.dev/fence-request annotation.
	TriggerManual Trigger = "Manual"
	// TriggerNodeDeleted: the Node was deleted while a policy covered it. Deleting a Node
	// means "permanently partitioned" (the 2016 Pod Safety proposal), after which PodGC would
	// force-delete its pods: Palisade's finalizer holds the deletion until the node is fenced.
	TriggerNodeDeleted Trigger = "NodeDeleted"
)

// NodeFenceSpec is fixed when the fence is created: the policy's methods and release settings
// are copied in, so a policy edited during a fence does not change it half-way. The API server
// refuses any change to it: an edit of a fence under way (a method taken out of a level, a dry
// run switched on) would release on a chain it never confirmed.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is fixed when the fence is created: delete the NodeFence (the node's next failure, request or deletion creates a new one) instead of editing it"
// +kubebuilder:validation:XValidation:rule="self.methods.map(m, m.name).all(n, self.methods.filter(m, m.name == n).size() == 1)",message="spec.methods: every method needs a unique name (the fence's steps name their method)"
type NodeFenceSpec struct {
	// NodeName is the node being fenced.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.nodeName cannot be changed"
	NodeName string `json:"nodeName"`
	// PolicyName is the FencingPolicy that covered the node when the fence was created.
	// +optional
	PolicyName string `json:"policyName,omitempty"`
	// Trigger says whether a detector or a person asked.
	Trigger Trigger `json:"trigger"`
	// Reason is the detector's finding or the requester's text.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
	// Verdict is the detectors' classification of the node when a detector asked: Dead (no
	// signal on any path), Partitioned (alive, cut off from the API server) or KubeletDown (the
	// node and its agent alive, its kubelet not). Empty for manual requests. It decides the
	// Executor's channel: through the API server for KubeletDown, direct otherwise.
	// +kubebuilder:validation:Enum=Dead;Partitioned;KubeletDown
	// +optional
	Verdict string `json:"verdict,omitempty"`
	// RequestedBy is the authenticated user who asked for a manual fence, as the API server
	// recorded it in the Node's palisade.dev/fence-requested-by annotation (the chart's
	// admission policies); empty when it was not recorded. Never the client's field manager,
	// which any client can choose.
	// +optional
	RequestedBy string `json:"requestedBy,omitempty"`
	// Methods is the escalation chain, copied from the policy.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	Methods []Method `json:"methods"`
	// Release is copied from the policy.
	// +optional
	Release Release `json:"release,omitempty"`
	// Waiting says which of the node's pods wait on this fence: those the policy's workloads
	// name (all of the node's pods when it names none), at most 10, as namespace/name, when the
	// fence was created.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Waiting []string `json:"waiting,omitempty"`
	// Urgency is how many of the node's pods waiting on this fence belong to a
	// PodDisruptionBudget that allows no more disruption (its disruptionsAllowed is 0): their
	// workload is already at its limit. When more fences are under way than the controller
	// advances at once, those with the higher urgency go first.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Urgency int32 `json:"urgency,omitempty"`
	// Recovery is copied from the policy.
	// +optional
	Recovery Recovery `json:"recovery,omitempty"`
	// PreviousRecoveryTime is when the node's previous fence ended with the node unfenced, if
	// that fence was still on record when this one was created: a fence soon after a recovery
	// makes the node a flapping one (recovery.flapWindow).
	// +optional
	PreviousRecoveryTime *metav1.Time `json:"previousRecoveryTime,omitempty"`
	// DryRun records decisions without taking any step.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
}

// Phase is where a fence stands.
// +kubebuilder:validation:Enum=Pending;Fencing;Fenced;Releasing;Released;Failed;Recovered
type Phase string

const (
	PhasePending   Phase = "Pending"   // created, no step taken yet
	PhaseFencing   Phase = "Fencing"   // a method is running or being confirmed
	PhaseFenced    Phase = "Fenced"    // a method is confirmed by read-back
	PhaseReleasing Phase = "Releasing" // taint, pods and attachments are being released
	PhaseReleased  Phase = "Released"  // done: the node's workload may run elsewhere
	PhaseFailed    Phase = "Failed"    // every method failed; nothing more is released (the Released condition says what was)
	PhaseRecovered Phase = "Recovered" // the released node came back clean and was unfenced
)

// StepName names one step of a fence.
type StepName string

const (
	StepPowerOff             StepName = "PowerOff"             // send the power-off command
	StepConfirmOff           StepName = "ConfirmOff"           // read the power state back until Off
	StepTerminate            StepName = "Terminate"            // order the node's agent to terminate the workload
	StepConfirmTerminated    StepName = "ConfirmTerminated"    // read back that no workload container runs
	StepAwaitIsolation       StepName = "AwaitIsolation"       // note the last signal from a node expected to fence itself
	StepConfirmSelfFenced    StepName = "ConfirmSelfFenced"    // no signal on any path for the method's safeAfter
	StepStorageFence         StepName = "StorageFence"         // have the storage refuse the node's addresses
	StepConfirmStorageFenced StepName = "ConfirmStorageFenced" // read back that the storage fence holds
	StepVerifyFenced         StepName = "VerifyFenced"         // watch the node's own signals: none may follow the confirmation
	StepTaint                StepName = "Taint"                // add the out-of-service taint
	StepDeletePods           StepName = "DeletePods"           // force-delete the pods bound to the node
	StepDetachVolumes        StepName = "DetachVolumes"        // force-detach the cloud volumes of a stopped instance (AWS forceDetachVolumes)
	StepReleaseAttachments   StepName = "ReleaseAttachments"   // delete the node's VolumeAttachments
)

// StepState is the state of one step.
type StepState string

const (
	StepStarted   StepState = "Started"
	StepSucceeded StepState = "Succeeded"
	StepFailed    StepState = "Failed"
)

// Step is one entry of a fence's timeline. A step is recorded as Started before it is taken;
// a controller that finds a Started step after a restart takes it again (every step is
// idempotent) and never moves past a step that has not Succeeded.
type Step struct {
	Name StepName `json:"name"`
	// Method is the fencing method of a method's steps (PowerOff, ConfirmOff, ...); on a
	// release step that failed because the node showed life, the method it disproved.
	// +optional
	Method string    `json:"method,omitempty"`
	State  StepState `json:"state"`
	// Attempts counts how often the step was taken.
	// +optional
	Attempts  int32       `json:"attempts,omitempty"`
	StartTime metav1.Time `json:"startTime"`
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// Reason is a CamelCase word for a failed or retrying step (BMCUnreachable, PowerStillOn…).
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what happened, for people.
	// +optional
	Message string `json:"message,omitempty"`
	// Target names the machine a method's fence step acts on, as its provider named it (a
	// power method: the node, its BMC's address and system, or its instance or VM), recorded
	// before the step's command is sent. The method's later calls (the command again, the
	// read-back, a volume release, a power-on) refuse another machine: a fence target changed
	// meanwhile cannot confirm the fence.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Target string `json:"target,omitempty"`
}

// NodeFenceStatus is the durable record of a fence.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.token) || (has(self.token) && self.token == oldSelf.token)",message="status.token cannot be changed once recorded"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.liftToken) || (has(self.liftToken) && self.liftToken == oldSelf.liftToken)",message="status.liftToken cannot be changed once recorded"
type NodeFenceStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Token is the fence's fencing token, recorded before its first step: a number drawn from
	// a cluster-wide counter that only grows, so a later fence always carries a higher one.
	// The orders the fence sends carry it, and whoever carries them out (a node's agent, a
	// storage gateway) refuses one older than a token it already took: a late or replayed
	// order of an earlier fence is never carried out. It cannot change once recorded.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Token int64 `json:"token,omitempty"`
	// LiftToken is the fencing token of the lift of the fence's storage fences (recovery, or
	// the NodeFence's deletion), drawn from the same counter and recorded before the first lift
	// is sent; every retry carries it. A controller working from a stale copy of the record
	// cannot record one (its write is refused), so it sends no lift, and a lift recorded
	// before a newer fence of the node carries a token older than that fence's, which the
	// storage refuses. It cannot change once recorded.
	// +kubebuilder:validation:Minimum=1
	// +optional
	LiftToken int64 `json:"liftToken,omitempty"`
	// Phase is where the fence stands.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Method is the method running now, or the one that confirmed the fence.
	// +optional
	Method string `json:"method,omitempty"`
	// MethodStartTime is when the current method began; its timeout counts from here.
	// +optional
	MethodStartTime *metav1.Time `json:"methodStartTime,omitempty"`
	// BootID is the node's boot ID when the fence began. A reboot since the fence is proven by a
	// boot ID other than this one and every one of confirmedBootIDs.
	// +optional
	BootID string `json:"bootID,omitempty"`
	// ConfirmedBootIDs are the boot IDs the node was seen in when its fence's methods were
	// confirmed, other than bootID: its Node's (status.nodeInfo.bootID) and its agent's latest
	// heartbeat's, read at each confirmation. A method that leaves the node running (the
	// Executor) acts in the boot it is confirmed in, which is another than bootID when the node
	// rebooted while the fence was under way: back in that boot, it has not rebooted since the
	// fence acted.
	// +optional
	// +listType=set
	ConfirmedBootIDs []string `json:"confirmedBootIDs,omitempty"`
	// AgentBootID is the boot ID the node's agent last reported to the fence, when the fence
	// began or with a method's confirmation (its heartbeat over the mTLS channel, or the
	// executor's answer); empty when no agent was heard. It is also a boot the node was in
	// before the fence acted. A node with an agent whose fence kept its machine on (no
	// confirmed power-off) is found rebooted only once its agent heartbeats from the node's
	// new boot too: the kubelet's report alone may come from its stolen credentials.
	// +optional
	AgentBootID string `json:"agentBootID,omitempty"`
	// TaintFound says that the Taint step found an out-of-service taint on the node that it
	// had not put there (an operator's, another controller's): the step counted it as done,
	// and recovery leaves it on the node, said by an OutOfServiceTaintKept event. A taint the
	// step put on is removed at recovery, and so is one put back by hand after it was taken
	// off while the node was held (as the TaintRemoved hold asks). A later Taint step that
	// puts its own taint on (after another confirmation) clears it.
	// +optional
	TaintFound bool `json:"taintFound,omitempty"`
	// NodeUID is the UID of the Node when the fence began. A Node of the same name with another
	// UID was registered anew since, perhaps by another machine: its boot ID says nothing about
	// the machine fenced, so it is not unfenced on it.
	// +optional
	NodeUID string `json:"nodeUID,omitempty"`
	// FencedTime is when the fence was confirmed.
	// +optional
	FencedTime *metav1.Time `json:"fencedTime,omitempty"`
	// Liveness is what the node's own signals showed when the current method's fence was
	// confirmed; a Lease renewal, an agent heartbeat or a peer reaching the node after it means
	// the fence hit another machine, and nothing more is released.
	// +optional
	Liveness *Liveness `json:"liveness,omitempty"`
	// ConfirmedLeaseRenewTime is the renewTime of the node's Lease read with the current
	// method's confirmation (the node's clock), recorded in the confirmation's write. VerifyFenced
	// watches from it (liveness.leaseRenewTime is never a later one), so that a renewal after the
	// confirmation is a sign of life however late VerifyFenced first looks: a controller
	// restarted, or a new leader, in between. Unset when the node had no Lease.
	// +optional
	ConfirmedLeaseRenewTime *metav1.MicroTime `json:"confirmedLeaseRenewTime,omitempty"`
	// ReleasedTime is when the last release step finished.
	// +optional
	ReleasedTime *metav1.Time `json:"releasedTime,omitempty"`
	// PodsDeleted counts the pods this fence released: force-deleted, or marked Failed and then
	// deleted by their owner first (the StatefulSet controller deletes a Failed pod at once).
	// +optional
	PodsDeleted int32 `json:"podsDeleted,omitempty"`
	// AttachmentsReleased counts the VolumeAttachments deleted.
	// +optional
	AttachmentsReleased int32 `json:"attachmentsReleased,omitempty"`
	// AttachmentsForced names the VolumeAttachments Palisade freed from a CSI attacher that kept
	// reporting a detach error (it removed the attacher's finalizer): their
	// ControllerUnpublishVolume never succeeded, so the storage system may still publish their
	// volumes to the fenced node, and a backend that attaches a volume to one node at a time may
	// refuse it elsewhere until it is unpublished there. Recorded just before Palisade frees
	// them, so that a controller killed in between leaves the record (one whose removal then
	// found the attachment gone may have been detached by its attacher after all).
	// "attachment (volume)"; at most MaxAttachmentsForced, the count of the rest in the last.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	AttachmentsForced []string `json:"attachmentsForced,omitempty"`
	// PowerRestoredTime is when Palisade powered the node's machine back on after the release
	// (the policy's recovery.powerOn).
	// +optional
	PowerRestoredTime *metav1.Time `json:"powerRestoredTime,omitempty"`
	// PowerOffDisprovedTime is when Palisade first saw the released node, fenced by a power
	// method, post its status with the boot ID it had when fenced: its machine never lost
	// power. Unfence requests the node carried then were removed; one made since is honoured.
	// +optional
	PowerOffDisprovedTime *metav1.Time `json:"powerOffDisprovedTime,omitempty"`
	// Recovery records how the released node was unfenced, once Palisade has decided to.
	// +optional
	Recovery *RecoveryRecord `json:"recovery,omitempty"`
	// Steps is the timeline, oldest first.
	// +optional
	// +listType=atomic
	Steps []Step `json:"steps,omitempty"`
	// Conditions: Fenced, Released.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RecoveryHow says why a node was found clean.
// +kubebuilder:validation:Enum=Rebooted;ConfirmedClean
type RecoveryHow string

const (
	// RecoveryRebooted: the node came back with another boot ID than when it was fenced.
	RecoveryRebooted RecoveryHow = "Rebooted"
	// RecoveryConfirmedClean: an operator confirmed it clean (palisade.dev/unfence-request).
	RecoveryConfirmedClean RecoveryHow = "ConfirmedClean"
)

// RecoveryRecord is how and when a released node was unfenced.
type RecoveryRecord struct {
	How RecoveryHow `json:"how"`
	// Time is when Palisade decided to unfence the node.
	Time metav1.Time `json:"time"`
	// BootID is the node's boot ID when it was found clean.
	// +optional
	BootID string `json:"bootID,omitempty"`
	// RequestedBy is the operator who confirmed the node clean, as the API server recorded it
	// (palisade.dev/unfence-requested-by); empty when not recorded or when it rebooted.
	// +optional
	RequestedBy string `json:"requestedBy,omitempty"`
	// Reason is the operator's text (palisade.dev/unfence-request), or the boot IDs compared.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
	// RecoveredTime is when the node was unfenced: taint removed, storage fences lifted.
	// +optional
	RecoveredTime *metav1.Time `json:"recoveredTime,omitempty"`
}

// Liveness is the baseline of the release-time liveness check.
type Liveness struct {
	// LeaseRenewTime is the renewTime of the node's Lease read with the confirmation
	// (status.confirmedLeaseRenewTime; for a confirmation recorded without it, read when
	// VerifyFenced first looked), on the node's clock; any later renewTime is a renewal after the
	// fence. Unset when the node had no Lease.
	// +optional
	LeaseRenewTime *metav1.MicroTime `json:"leaseRenewTime,omitempty"`
	// WatchUntil is when VerifyFenced stops watching and lets the release begin; each release
	// step looks again before it acts.
	WatchUntil metav1.Time `json:"watchUntil"`
}

// NodeFence records the fencing of one node, step by step.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nf
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Method",type=string,JSONPath=`.status.method`
// +kubebuilder:printcolumn:name="Verdict",type=string,JSONPath=`.spec.verdict`
// +kubebuilder:printcolumn:name="Trigger",type=string,JSONPath=`.spec.trigger`,priority=1
// +kubebuilder:printcolumn:name="Token",type=integer,JSONPath=`.status.token`,priority=1
// +kubebuilder:printcolumn:name="Urgency",type=integer,JSONPath=`.spec.urgency`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.nodeName",message="a NodeFence is named after its node: metadata.name must equal spec.nodeName"
type NodeFence struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeFenceSpec   `json:"spec"`
	Status NodeFenceStatus `json:"status,omitempty"`
}

// NodeFenceList is a list of NodeFence.
// +kubebuilder:object:root=true
type NodeFenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeFence `json:"items"`
}

// Condition types on NodeFence and FencingPolicy.
const (
	ConditionFenced   = "Fenced"
	ConditionReleased = "Released"
	// ConditionRecovered (on a released NodeFence) is False while the node is held fenced,
	// with the reason (NodeNotBack, BootIDUnchanged, Flapping, …), and True once it was
	// unfenced (Rebooted, ConfirmedClean).
	ConditionRecovered        = "Recovered"
	ConditionStormGuardActive = "StormGuardActive"
	// ConditionControllerBlind (on FencingPolicy) is True while the controller cannot see
	// fresh renewals (nothing is fenced automatically, invariant 3), or could see them again
	// too recently to judge a Lease (no Lease counts as expired; see ReasonFreshLeasePeriod).
	ConditionControllerBlind = "ControllerBlind"
	// ConditionInsecureTLS (on FencingPolicy) is True while one of its methods skips the
	// verification of the certificates of the BMCs it talks to (redfish.insecureSkipVerify).
	ConditionInsecureTLS = "InsecureTLS"
	// ConditionLeaseTimeoutRaised (on FencingPolicy) is True while some of its nodes' kubelets
	// renew their Lease less often than every half of detection.leaseTimeout: those nodes are
	// judged with two of their renewal intervals instead. Absent while none is.
	ConditionLeaseTimeoutRaised = "LeaseTimeoutRaised"
	// ConditionInvalidSpec (on FencingPolicy) is True while the controller cannot use the
	// policy as written: a spec the API server stored before a validation rule that now refuses
	// it, or one no rule of the CRD can check (a node selector's label keys). The message names
	// every problem and what to change.
	ConditionInvalidSpec = "InvalidSpec"
	// ConditionOverlapping (on FencingPolicy) is True while nodes its selector matches are
	// covered by a policy before it by name (the first by name covers a node): they are fenced
	// by that policy's rules, not this one's. The message names those policies and counts.
	// Absent while none is.
	ConditionOverlapping = "Overlapping"
	// ReasonNodesTaken (Overlapping=True, and its Warning event): policies before this one by
	// name cover some of the nodes its selector matches.
	ReasonNodesTaken = "NodesTakenByEarlierPolicy"
)

// InvalidSpec reasons: the first problem found (True), or SpecUsable (False).
const (
	// ReasonNodeSelectorInvalid (InvalidSpec=True): the node selector does not parse; the
	// policy covers no node until it is fixed (its nodes fall to the next policy that selects
	// them, by name, or to none).
	ReasonNodeSelectorInvalid = "NodeSelectorInvalid"
	// ReasonPodSelectorInvalid (InvalidSpec=True): workloads.podSelector does not parse; no
	// failed node of the policy is fenced automatically until it is fixed (fence requests and
	// node deletions still are, since they are fenced whatever the node holds).
	ReasonPodSelectorInvalid = "PodSelectorInvalid"
	// ReasonSelfFenceTimeoutTooShort (InvalidSpec=True): a SelfFence method's timeout does not
	// exceed its safeAfter, so it can only time out (MethodTimedOut) and the chain moves on.
	ReasonSelfFenceTimeoutTooShort = "SelfFenceTimeoutTooShort"
	// ReasonAgentMethodNotFirstInLevel (InvalidSpec=True): a level lists a method that acts
	// through the node's agent (the Executor) after another of its methods: the level can
	// never be taken automatically (a Dead node's chain drops it, and a node alive on other
	// signals is fenced only by a chain whose first method is the Executor), and a power-off
	// before the Executor would leave it nothing to stop.
	ReasonAgentMethodNotFirstInLevel = "AgentMethodNotFirstInLevel"
	// ReasonMethodSettingInvalid (InvalidSpec=True): a method's setting no fence could use (a
	// Secret reference that is no Secret's name, a vSphere server with a scheme, a gateway
	// without its port), stored before the CRD's rule: its fences fail there (BadTarget).
	ReasonMethodSettingInvalid = "MethodSettingInvalid"
	// ReasonStormGuardInvalid (InvalidSpec=True): stormGuard.maxUnhealthy is neither a count
	// (0 to 1000000) nor a percentage from 0% to 100% (a policy stored before the CRD's rule):
	// no failed node of the policy is fenced automatically until it is fixed.
	ReasonStormGuardInvalid = "StormGuardInvalid"
	// ReasonSpecUsable (InvalidSpec=False): the controller can use the policy as written.
	ReasonSpecUsable = "SpecUsable"
)

// InsecureTLS reasons.
const (
	// ReasonCertificatesUnverified (InsecureTLS=True): a method skips certificate verification.
	ReasonCertificatesUnverified = "CertificatesUnverified"
	// ReasonCertificatesVerified (InsecureTLS=False): every method verifies certificates.
	ReasonCertificatesVerified = "CertificatesVerified"
)

// LeaseTimeoutRaised reasons.
const (
	// ReasonShorterThanTwoRenewals (LeaseTimeoutRaised=True): detection.leaseTimeout is shorter
	// than two renewal intervals of some of the policy's kubelets, which would read a Lease
	// renewed on time as expired; those nodes are judged with two of their intervals.
	ReasonShorterThanTwoRenewals = "ShorterThanTwoRenewals"
)

// ControllerBlind reasons: the cause of the controller's last loss of sight (True), or Seeing
// (False). The controller's sight tracker (detectors/sight) uses the same words as causes.
const (
	// ReasonSeeing (ControllerBlind=False): the controller sees its own canary Lease fresh
	// and every node has had a full lease period since.
	ReasonSeeing = "Seeing"
	// ReasonStarting: the controller started or won leadership; it has seen no renewal yet.
	ReasonStarting = "Starting"
	// ReasonAPIUnreachable: the controller cannot write through the API server.
	ReasonAPIUnreachable = "APIUnreachable"
	// ReasonWatchStale: writes work but the controller's watch of Leases does not show them.
	ReasonWatchStale = "WatchStale"
	// ReasonClockJumped: the controller's wall clock jumped against its monotonic clock.
	ReasonClockJumped = "ClockJumped"
	// ReasonFreshLeasePeriod (ControllerBlind=True): the controller sees again, and gives
	// every node a full lease period from that moment before its Lease counts as expired; a
	// node silent on every path (agent lost, no peer reaching it) counts as Dead once its
	// kubelet's next renewal, counted from that moment, is missed.
	ReasonFreshLeasePeriod = "FreshLeasePeriod"
)

// Condition reasons set by the controller. A Fenced=False condition of a failed fence carries
// the reason of its last failed step instead (a provider's or the controller's step reason).
const (
	// ReasonInProgress (Fenced=False): a fencing method is being taken.
	ReasonInProgress = "InProgress"
	// ReasonDryRun (Fenced=False): the policy is a dry run; no step is taken.
	ReasonDryRun = "DryRun"
	// ReasonPowerOffConfirmed (Fenced=True): the BMC read back power Off.
	ReasonPowerOffConfirmed = "PowerOffConfirmed"
	// ReasonWorkloadTerminationConfirmed (Fenced=True): the node's agent confirmed, with a
	// runtime read-back, that no workload container runs.
	ReasonWorkloadTerminationConfirmed = "WorkloadTerminationConfirmed"
	// ReasonStorageFenceConfirmed (Fenced=True): the storage (a NetworkFence's driver, or every
	// storage gateway) reports the node's addresses fenced.
	ReasonStorageFenceConfirmed = "StorageFenceConfirmed"
	// ReasonSelfFenceSafeTimePassed (Fenced=True): the node sent no signal on any path for the
	// self-fence's safe time.
	ReasonSelfFenceSafeTimePassed = "SelfFenceSafeTimePassed"
	// ReasonNodeAliveAfterFence (Fenced=False; also a step reason): the node renewed its
	// Lease, heartbeated or was reached by a peer after its fence was confirmed, so the fence
	// hit another machine or the provider's read-back lied; nothing more is released and the
	// next method is taken.
	ReasonNodeAliveAfterFence = "NodeAliveAfterFence"
	// ReasonWorkloadRunningAfterFence (Fenced=False; also a step reason): after a method that
	// leaves the node running (the Executor) confirmed its workload stopped, the node's agent
	// read back workload containers running again — something, typically a kubelet the agent
	// did not stop, started them; nothing more is released and the next method is taken.
	ReasonWorkloadRunningAfterFence = "WorkloadRunningAfterFence"
	// ReasonWorkloadUnverified (Fenced=False; also a step reason): after a method that leaves
	// the node running (the Executor) confirmed its workload stopped, no read-back of the
	// node's container runtime came from its agent after the watch window's end (the agent
	// fell silent, or could not read the runtime): whether the workload runs again cannot be
	// known; nothing more is released and the next method is taken.
	ReasonWorkloadUnverified = "WorkloadUnverified"
	// ReasonReleased (Released=True): the release steps the policy asked for are done.
	ReasonReleased = "Released"
	// ReasonNotFenced (Released=False): every method failed; nothing more is released. If the
	// node showed life between two release steps, the message says what was already released
	// (pods force-deleted, attachments released): a replacement may run beside the original.
	ReasonNotFenced = "NotFenced"
	// ReasonWithinLimit (StormGuardActive=False): few enough nodes look failed or late to fence.
	ReasonWithinLimit = "WithinLimit"
	// ReasonTooManyUnhealthy (StormGuardActive=True): too many nodes look failed or late
	// (Suspect); automatic fencing is stopped.
	ReasonTooManyUnhealthy = "TooManyUnhealthy"
)

// MaxReason is the most spec.reason holds (its schema's maxLength).
const MaxReason = 1024

// MaxAttachmentsForced is how many entries status.attachmentsForced keeps (the last counts the
// rest when there are more).
const MaxAttachmentsForced = 16
