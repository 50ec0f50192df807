// Package child is the node agent's client of its palisade-executor child process: it finds
// the binary, starts it on the first need (with the kernel's parent-death signal, so that it
// never outlives the agent), speaks providers/executor/protocol over its stdin and stdout, and
// fails every call with what to do once the process ended, hung or wrote garbage. It links the
// standard library and the protocol only, so that the agent carries no container runtime client.
package child
