// Package fake is a recording providers.Fencer for unit tests: it plays a power switch per node
// (running until fenced), records every call, returns an error a test injected for the next
// call of a method, can play a lying BMC that accepts the fence and changes nothing, and can
// pin Check's answer for a method without a switch. It is safe for concurrent use.
package fake
