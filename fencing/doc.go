// Package fencing owns the decision and the durable state. The node controller turns detector
// observations and manual requests into NodeFence objects, guarded by the policy's storm guard;
// the NodeFence controller walks each fence through its steps — power off, confirm off by
// read-back, taint out-of-service, force-delete the node's pods, release its attachments —
// recording every step on the NodeFence before taking it and stopping at the first step that
// blocks. Nothing is released before a fence is confirmed (invariant 1), and a restarted
// controller resumes from the record without skipping a confirmation (invariant 2).
package fencing
