package executor

// ParseSignal exposes parseSignal to the external tests.
var ParseSignal = parseSignal

// GraceWithinLeft exposes graceWithin to the external tests.
var GraceWithinLeft = graceWithin

// CRIStopSignal exposes criStopSignal to the external tests.
var CRIStopSignal = criStopSignal
