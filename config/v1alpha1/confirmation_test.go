package v1alpha1

import "testing"

// PowerOffMethod finds the power-off among all the methods of the confirmation, whatever
// status.method says, and forgets one whose confirmation was disproved since.
func TestPowerOffMethod(t *testing.T) {
	ok := func(name StepName, method string) Step { return Step{Name: name, Method: method, State: StepSucceeded} }
	alive := Step{Name: StepVerifyFenced, Method: "ipmi", State: StepFailed, Reason: ReasonNodeAliveAfterFence}
	for _, tc := range []struct {
		name  string
		steps []Step
		want  string
	}{
		{"a power-off alone", []Step{ok(StepPowerOff, "ipmi"), ok(StepConfirmOff, "ipmi"), ok(StepTaint, "")}, "ipmi"},
		{"a level: power-off, then storage fence", []Step{ok(StepPowerOff, "ipmi"), ok(StepConfirmOff, "ipmi"),
			ok(StepStorageFence, "storage"), ok(StepConfirmStorageFenced, "storage"), ok(StepTaint, "")}, "ipmi"},
		{"a storage fence alone", []Step{ok(StepStorageFence, "storage"), ok(StepConfirmStorageFenced, "storage")}, ""},
		{"a power-off still being read back", []Step{ok(StepPowerOff, "ipmi"), {Name: StepConfirmOff, Method: "ipmi", State: StepStarted}}, ""},
		{"a power-off disproved, then an Executor", []Step{ok(StepPowerOff, "ipmi"), ok(StepConfirmOff, "ipmi"), alive,
			ok(StepTerminate, "executor"), ok(StepConfirmTerminated, "executor")}, ""},
		{"a power-off disproved, then another", []Step{ok(StepPowerOff, "ipmi"), ok(StepConfirmOff, "ipmi"), alive,
			ok(StepPowerOff, "backup"), ok(StepConfirmOff, "backup")}, "backup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NodeFenceStatus{Steps: tc.steps}
			if got := s.PowerOffMethod(); got != tc.want {
				t.Errorf("PowerOffMethod() = %q, want %q", got, tc.want)
			}
		})
	}
}
