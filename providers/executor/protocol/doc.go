// Package protocol is what palisade-agent and its child process palisade-executor say to each
// other: newline-delimited JSON, one Request per line on the executor's stdin, one Response per
// line on its stdout, matched by ID. The executor answers requests concurrently and in any
// order (a read-back is answered while a terminate runs). The package holds types only, so that
// the agent links none of the container runtime's client code.
package protocol
