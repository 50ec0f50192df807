package channel

import (
	"strings"
	"testing"

	"palisade.dev/palisade/config/agentwire"
)

// TestValidateRefusesOverflowAndNegativeCounts keeps the two reports FuzzHeartbeatBody found
// accepted: an interval whose milliseconds overflow a time.Duration into a negative one, and a
// negative runtime read-back.
func TestValidateRefusesOverflowAndNegativeCounts(t *testing.T) {
	minus := -3
	for _, tc := range []struct {
		name string
		rep  agentwire.Report
	}{
		{"interval overflowing a duration", agentwire.Report{Node: "n1", IntervalMillis: 9223372036854775807}},
		{"interval above the bound", agentwire.Report{Node: "n1", IntervalMillis: agentwire.MaxIntervalMillis + 1}},
		{"negative running containers", agentwire.Report{Node: "n1", RunningContainers: &minus}},
		{"a probing peer without a name", agentwire.Report{Node: "n1", ProbedBy: []agentwire.PeerReport{{Reachable: true, At: t0}}}},
		{"a probing peer without a time", agentwire.Report{Node: "n1", ProbedBy: []agentwire.PeerReport{{Node: "n2", Reachable: true}}}},
		{"more probing peers than MaxPeers", agentwire.Report{Node: "n1", ProbedBy: make([]agentwire.PeerReport, agentwire.MaxPeers+1)}},
		{"a boot ID longer than MaxBootID", agentwire.Report{Node: "n1", BootID: strings.Repeat("b", agentwire.MaxBootID+1)}},
		{"negative self-fence time", agentwire.Report{Node: "n1", SelfFenceWithinMillis: -1}},
		{"self-fence time above the bound", agentwire.Report{Node: "n1", SelfFenceWithinMillis: agentwire.MaxSelfFenceWithinMillis + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := validate(tc.rep); err == nil {
				t.Fatalf("validate(%+v) accepted it", tc.rep)
			}
		})
	}
	if err := validate(agentwire.Report{Node: "n1", IntervalMillis: agentwire.MaxIntervalMillis}); err != nil {
		t.Fatalf("validate refused the largest interval: %v", err)
	}
}
