package fencing

import (
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// methodKind is what fencing knows of a method type; everything else (targets, credentials,
// channels, how to read a fence back) is its provider's.
type methodKind struct {
	// fence starts the fence through the provider's Fence; confirm reads it back through Check.
	fence, confirm v1alpha1.StepName
	// confirmedReason is the Fenced condition's reason once confirm succeeds.
	confirmedReason string
	// needsAgent: the method acts through the node's agent. A node with no signal on any path
	// (Dead) skips it; a node that independent signals show alive is fenced only by a chain
	// that starts with such a method (invariant 4: never a blind power-off).
	needsAgent bool
	// keepsNodeRunning: the method stops the node's workload and leaves the node up, so the
	// node's Lease, heartbeats and peers are expected after its confirmation and are no
	// evidence against it (its confirmation comes from the node's own authenticated agent);
	// its workload is, as the agent reads it back (liveness.go). Every other method is
	// checked for signs of life before anything is released; a new method is checked unless
	// its row says otherwise.
	keepsNodeRunning bool
	// lifted: the fence outlives the fence's work (a storage fence stays after the release)
	// and is lifted through the provider's Unfence when the NodeFence is deleted, which the
	// finalizer palisade.dev/lift-storage-fence holds until then (unfence.go).
	lifted bool
}

// methodKinds is the table of method types. Adding a method takes a provider package, one row
// here and one line of wiring in cmd/palisade-controller/app.
var methodKinds = map[v1alpha1.MethodType]methodKind{
	v1alpha1.MethodIPMI:      {v1alpha1.StepPowerOff, v1alpha1.StepConfirmOff, v1alpha1.ReasonPowerOffConfirmed, false, false, false},
	v1alpha1.MethodRedfish:   {v1alpha1.StepPowerOff, v1alpha1.StepConfirmOff, v1alpha1.ReasonPowerOffConfirmed, false, false, false},
	v1alpha1.MethodAWS:       {v1alpha1.StepPowerOff, v1alpha1.StepConfirmOff, v1alpha1.ReasonPowerOffConfirmed, false, false, false},
	v1alpha1.MethodVSphere:   {v1alpha1.StepPowerOff, v1alpha1.StepConfirmOff, v1alpha1.ReasonPowerOffConfirmed, false, false, false},
	v1alpha1.MethodExecutor:  {v1alpha1.StepTerminate, v1alpha1.StepConfirmTerminated, v1alpha1.ReasonWorkloadTerminationConfirmed, true, true, false},
	v1alpha1.MethodSelfFence: {v1alpha1.StepAwaitIsolation, v1alpha1.StepConfirmSelfFenced, v1alpha1.ReasonSelfFenceSafeTimePassed, false, false, false},
	// A storage fence leaves the node running, cut off from its volumes: its Lease, heartbeats
	// and peers are evidence against the fence like any other method's.
	v1alpha1.MethodNetworkFence:   {v1alpha1.StepStorageFence, v1alpha1.StepConfirmStorageFenced, v1alpha1.ReasonStorageFenceConfirmed, false, false, true},
	v1alpha1.MethodStorageGateway: {v1alpha1.StepStorageFence, v1alpha1.StepConfirmStorageFenced, v1alpha1.ReasonStorageFenceConfirmed, false, false, true},
}

// kindOfStep is the method kind one of whose steps s is.
func kindOfStep(s v1alpha1.StepName) (methodKind, bool) {
	for _, k := range methodKinds {
		if k.fence == s || k.confirm == s {
			return k, true
		}
	}
	return methodKind{}, false
}

// isConfirmStep says whether s is a method's confirmation.
func isConfirmStep(s v1alpha1.StepName) bool {
	k, ok := kindOfStep(s)
	return ok && k.confirm == s
}

// Confirmed says whether the record holds a confirmed fence: the confirmation steps of every
// method of a level Succeeded (one, for a method without a level), and no sign of the node's
// life disproved them since. Every release step requires it (invariant 1).
func Confirmed(nf *v1alpha1.NodeFence) bool {
	confirmed, _ := confirmation(nf)
	return confirmed
}

// Verified says whether the confirmed fence also passed VerifyFenced: the node showed no sign
// of life for the watch window after its confirmation.
func Verified(nf *v1alpha1.NodeFence) bool {
	_, verified := confirmation(nf)
	return verified
}

func confirmation(nf *v1alpha1.NodeFence) (confirmed, verified bool) {
	done := map[string]bool{} // methods confirmed and not disproved since
	for _, s := range nf.Status.Steps {
		switch {
		case s.State == v1alpha1.StepSucceeded && isConfirmStep(s.Name):
			done[s.Method] = true
			confirmed, verified = levelDone(nf, s.Method, done), false
		case s.State == v1alpha1.StepSucceeded && s.Name == v1alpha1.StepVerifyFenced:
			verified = confirmed
		case disproved(s):
			confirmed, verified = false, false
			clear(done)
		}
	}
	return confirmed, verified
}

// levelDone says whether every method of method's level is in done.
func levelDone(nf *v1alpha1.NodeFence, method string, done map[string]bool) bool {
	i := methodIndex(nf, method)
	if nf.Spec.Methods[i].Name != method {
		return false
	}
	for _, name := range levelNames(nf.Spec.Methods, i) {
		if !done[name] {
			return false
		}
	}
	return true
}
