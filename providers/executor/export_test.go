package executor

// ParseSignal exposes parseSignal to the external tests.
var ParseSignal = parseSignal

// GraceWithinLeft exposes graceWithin to the external tests.
var GraceWithinLeft = graceWithin
