// Package fake is a recording PowerFencer for unit tests: it holds a power state per node
// (On until told otherwise), records every call, returns an error a test injected for the next
// call of a method, and can play a lying BMC that accepts power-off and leaves the power on.
// It is safe for concurrent use.
package fake
