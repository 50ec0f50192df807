// Package fencing owns the decision and the durable state. The node controller turns detector
// observations and manual requests into NodeFence objects, guarded by the policy's storm guard;
// the NodeFence controller walks each fence through its steps — each method's fence and its
// confirmation by read-back, through the provider registered for the method's type (one row per
// type in methods.go; fencing never reads a BMC address or a credential), then taint
// out-of-service, force-delete the node's pods, release its attachments — recording every step
// before taking it and stopping at the first step that blocks. Nothing is released before a
// fence is confirmed (invariant 1); a restarted controller resumes from the record without
// skipping a confirmation (invariant 2).
package fencing
