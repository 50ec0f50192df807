// Package witness is the ground truth of the chaos runs: a small store that every replica of
// the test StatefulSet writes to, wherever it runs, and that keeps every accepted write with
// the store's own arrival time. A writer first opens a session naming itself (pod name, pod
// UID, node, the node's boot ID), then appends a counter every 100 ms; the store never refuses
// a write for being stale — it is a witness, not a lock — so two copies of one pet that both
// reach it leave two interleaved trails in the history, which is what the checker looks for.
//
// The history is a JSON-lines file, one Record per accepted open or append, in arrival order
// (Seq): it survives the run and is read back with ReadHistory.
package witness
