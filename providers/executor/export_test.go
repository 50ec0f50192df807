package executor

// ParseSignal exposes parseSignal to the external tests.
var ParseSignal = parseSignal
