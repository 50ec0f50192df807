// Package v1alpha1 holds Palisade's API: FencingPolicy (cluster-scoped; which nodes are
// watched, when a node counts as failed, how it is fenced and what is released afterwards) and
// NodeFence (cluster-scoped, one per node being fenced; the durable, step-by-step record of a
// fence, written before each step is taken so that a restarted controller resumes it).
//
// +kubebuilder:object:generate=true
// +groupName=fencing.palisade.dev
package v1alpha1
