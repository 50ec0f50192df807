package checker

import (
	"fmt"
	"strings"
	"time"

	"palisade.dev/palisade/test/witness"
)

// Violation is one broken property, said so that a reader can find it in the records.
type Violation struct {
	Check string // "a" … "f" with its name, e.g. "a OneCopy"
	Text  string
}

func (v Violation) String() string { return v.Check + ": " + v.Text }

// PowerOff is a power-off command a node's BMC received.
type PowerOff struct {
	Node string
	At   time.Time
}

// Input is everything a run left behind, and what the run knows of its faults.
type Input struct {
	History []witness.Record
	Audit   []Event
	// Overlap is how much two writers may overlap before (a) counts it; default 0.
	Overlap time.Duration
	// Releasers are the users whose VolumeAttachment deletions count as releases (the
	// controller's service account; KCM's attach-detach controller detaches after pods end).
	Releasers []string
	// MayFence are the nodes the faults struck, each with when the first fault that may fence
	// it struck (zero: not known); PowerOffs what the BMCs received.
	MayFence  map[string]time.Time
	PowerOffs []PowerOff
	// FenceBound is how long a fence may take to end, not counting Outages; default 5
	// minutes. End is the end of the run: a fence still open then is a violation (d).
	FenceBound time.Duration
	Outages    []Outage
	End        time.Time
	// Pods must all write after Healed.
	Pods   []string
	Healed time.Time
	// Fences are the NodeFences the run listed at its end (AuditComplete).
	Fences []string
}

// Check runs every check.
func Check(in Input) []Violation {
	if in.FenceBound <= 0 {
		in.FenceBound = 5 * time.Minute
	}
	v := AuditComplete(in.History, in.Audit, in.Fences)
	v = append(v, OneCopy(in.History, in.Overlap)...)
	v = append(v, NoWriteAfterRemoval(in.History, in.Audit, time.Second)...)
	v = append(v, NoEarlyRelease(in.Audit, in.Releasers)...)
	v = append(v, NoHealthyFenced(in.Audit, in.MayFence, in.PowerOffs)...)
	v = append(v, FencesEnd(in.Audit, in.FenceBound, in.End, in.Outages)...)
	v = append(v, ReplicasReturn(in.History, in.Pods, in.Healed)...)
	v = append(v, CleanUnfence(in.Audit)...)
	return v
}

// Report is the violations, one per line, and a summary line.
func Report(v []Violation) string {
	var b strings.Builder
	for _, x := range v {
		fmt.Fprintf(&b, "VIOLATION %s\n", x)
	}
	fmt.Fprintf(&b, "checker: %d violations", len(v))
	return b.String()
}
