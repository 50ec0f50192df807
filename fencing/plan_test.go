package fencing

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
)

func fenceWith(methods []string, release v1alpha1.Release, steps ...v1alpha1.Step) *v1alpha1.NodeFence {
	nf := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1", Release: release}}
	for _, m := range methods {
		nf.Spec.Methods = append(nf.Spec.Methods, v1alpha1.Method{Name: m, Type: v1alpha1.MethodIPMI})
	}
	nf.Status.Steps = steps
	return nf
}

func st(name v1alpha1.StepName, method string, state v1alpha1.StepState) v1alpha1.Step {
	return v1alpha1.Step{Name: name, Method: method, State: state}
}

func alive(name v1alpha1.StepName, method string) v1alpha1.Step {
	s := st(name, method, v1alpha1.StepFailed)
	s.Reason = v1alpha1.ReasonNodeAliveAfterFence
	return s
}

func TestConfirmedUntilDisproved(t *testing.T) {
	ok := v1alpha1.StepSucceeded
	tests := []struct {
		name                string
		steps               []v1alpha1.Step
		confirmed, verified bool
	}{
		{"nothing yet", nil, false, false},
		{"confirmed", []v1alpha1.Step{st(v1alpha1.StepConfirmOff, "ipmi", ok)}, true, false},
		{"confirmed and verified", []v1alpha1.Step{st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok)}, true, true},
		{"disproved", []v1alpha1.Step{st(v1alpha1.StepConfirmOff, "ipmi", ok), alive(v1alpha1.StepVerifyFenced, "ipmi")}, false, false},
		{"disproved after release began", []v1alpha1.Step{st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok),
			st(v1alpha1.StepTaint, "", ok), alive(v1alpha1.StepDeletePods, "ipmi")}, false, false},
		{"disproved, then the next method confirmed", []v1alpha1.Step{st(v1alpha1.StepConfirmOff, "ipmi", ok), alive(v1alpha1.StepVerifyFenced, "ipmi"),
			st(v1alpha1.StepPowerOff, "backup", ok), st(v1alpha1.StepConfirmOff, "backup", ok)}, true, false},
		{"an old verification does not verify a new confirmation", []v1alpha1.Step{st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok),
			alive(v1alpha1.StepTaint, "ipmi"), st(v1alpha1.StepConfirmOff, "backup", ok)}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nf := fenceWith([]string{"ipmi", "backup"}, v1alpha1.Release{}, tt.steps...)
			if got := Confirmed(nf); got != tt.confirmed {
				t.Errorf("Confirmed = %v, want %v", got, tt.confirmed)
			}
			if got := Verified(nf); got != tt.verified {
				t.Errorf("Verified = %v, want %v", got, tt.verified)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	const (
		ok      = v1alpha1.StepSucceeded
		started = v1alpha1.StepStarted
		bad     = v1alpha1.StepFailed
	)
	all := v1alpha1.Release{}
	noTaint := v1alpha1.Release{OutOfServiceTaint: ptr.To(false)}
	onlyTaint := v1alpha1.Release{DeletePods: ptr.To(false), ReleaseAttachments: ptr.To(false)}
	one, two := []string{"ipmi"}, []string{"ipmi", "backup"}
	tests := []struct {
		name string
		nf   *v1alpha1.NodeFence
		want action
	}{
		{"new fence powers off with the first method", fenceWith(two, all), action{kind: actStart, step: v1alpha1.StepPowerOff}},
		{"power-off sent: confirm next", fenceWith(one, all, st(v1alpha1.StepPowerOff, "ipmi", ok)),
			action{kind: actStart, step: v1alpha1.StepConfirmOff}},
		{"recorded but not finished: take it again", fenceWith(one, all, st(v1alpha1.StepPowerOff, "ipmi", started)),
			action{kind: actResume, step: v1alpha1.StepPowerOff}},
		{"confirm unfinished after a restart: confirm again, never skip", fenceWith(one, all,
			st(v1alpha1.StepPowerOff, "ipmi", ok), st(v1alpha1.StepConfirmOff, "ipmi", started)),
			action{kind: actResume, step: v1alpha1.StepConfirmOff}},
		{"confirmed: watch the node's signals first", fenceWith(one, all, st(v1alpha1.StepPowerOff, "ipmi", ok), st(v1alpha1.StepConfirmOff, "ipmi", ok)),
			action{kind: actStart, step: v1alpha1.StepVerifyFenced}},
		{"confirmed, every release disabled: still watch", fenceWith(one, v1alpha1.Release{OutOfServiceTaint: ptr.To(false), DeletePods: ptr.To(false), ReleaseAttachments: ptr.To(false)},
			st(v1alpha1.StepPowerOff, "ipmi", ok), st(v1alpha1.StepConfirmOff, "ipmi", ok)),
			action{kind: actStart, step: v1alpha1.StepVerifyFenced}},
		{"verified: taint", fenceWith(one, all, st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok)),
			action{kind: actStart, step: v1alpha1.StepTaint}},
		{"verified, taint disabled: delete pods", fenceWith(one, noTaint, st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok)),
			action{kind: actStart, step: v1alpha1.StepDeletePods}},
		{"node alive after the confirmation: escalate", fenceWith(two, all, st(v1alpha1.StepConfirmOff, "ipmi", ok), alive(v1alpha1.StepVerifyFenced, "ipmi")),
			action{kind: actStart, step: v1alpha1.StepPowerOff, method: 1}},
		{"node alive at a later release step: escalate", fenceWith(two, all, st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepVerifyFenced, "", ok),
			st(v1alpha1.StepTaint, "", ok), alive(v1alpha1.StepDeletePods, "ipmi")),
			action{kind: actStart, step: v1alpha1.StepPowerOff, method: 1}},
		{"node alive after the last method: fail", fenceWith(two, all, st(v1alpha1.StepConfirmOff, "backup", ok), alive(v1alpha1.StepVerifyFenced, "backup")),
			action{kind: actFail}},
		{"a release step failing otherwise does not escalate", fenceWith(two, all, st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepTaint, "ipmi", bad)),
			action{kind: actFail}},
		{"tainted: delete pods", fenceWith(one, all, st(v1alpha1.StepPowerOff, "ipmi", ok), st(v1alpha1.StepConfirmOff, "ipmi", ok),
			st(v1alpha1.StepTaint, "ipmi", ok)), action{kind: actStart, step: v1alpha1.StepDeletePods}},
		{"pods deleted: release attachments", fenceWith(one, all, st(v1alpha1.StepConfirmOff, "ipmi", ok), st(v1alpha1.StepDeletePods, "ipmi", ok)),
			action{kind: actStart, step: v1alpha1.StepReleaseAttachments}},
		{"attachments released: finish", fenceWith(one, all, st(v1alpha1.StepReleaseAttachments, "ipmi", ok)), action{kind: actFinish}},
		{"only the taint asked: finish after it", fenceWith(one, onlyTaint, st(v1alpha1.StepTaint, "ipmi", ok)), action{kind: actFinish}},
		{"method failed: escalate to the next", fenceWith(two, all, st(v1alpha1.StepPowerOff, "ipmi", bad)),
			action{kind: actStart, step: v1alpha1.StepPowerOff, method: 1}},
		{"confirm failed: escalate to the next", fenceWith(two, all, st(v1alpha1.StepPowerOff, "ipmi", ok), st(v1alpha1.StepConfirmOff, "ipmi", bad)),
			action{kind: actStart, step: v1alpha1.StepPowerOff, method: 1}},
		{"last method failed: fail, release nothing", fenceWith(two, all, st(v1alpha1.StepPowerOff, "ipmi", bad), st(v1alpha1.StepConfirmOff, "backup", bad)),
			action{kind: actFail}},
		{"second method's confirm resumes with that method", fenceWith(two, all, st(v1alpha1.StepPowerOff, "ipmi", bad),
			st(v1alpha1.StepPowerOff, "backup", ok)), action{kind: actStart, step: v1alpha1.StepConfirmOff, method: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan(tt.nf)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(action{})); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanTerminal(t *testing.T) {
	for _, phase := range []v1alpha1.Phase{v1alpha1.PhaseReleased, v1alpha1.PhaseFailed} {
		nf := fenceWith([]string{"ipmi"}, v1alpha1.Release{})
		nf.Status.Phase = phase
		if got := plan(nf); got.kind != actNone {
			t.Errorf("phase %s: plan = %+v, want none", phase, got)
		}
	}
}

func TestConfirmed(t *testing.T) {
	ok, started := v1alpha1.StepSucceeded, v1alpha1.StepStarted
	if Confirmed(fenceWith([]string{"ipmi"}, v1alpha1.Release{}, st(v1alpha1.StepPowerOff, "ipmi", ok), st(v1alpha1.StepConfirmOff, "ipmi", started))) {
		t.Error("a ConfirmOff still Started counted as confirmed")
	}
	if !Confirmed(fenceWith([]string{"ipmi"}, v1alpha1.Release{}, st(v1alpha1.StepConfirmOff, "ipmi", ok))) {
		t.Error("a ConfirmOff that Succeeded did not count")
	}
}

func TestMethodsFor(t *testing.T) {
	ipmi := v1alpha1.Method{Name: "ipmi", Type: v1alpha1.MethodIPMI}
	exec := v1alpha1.Method{Name: "executor", Type: v1alpha1.MethodExecutor}
	names := func(ms []v1alpha1.Method) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	tests := []struct {
		name    string
		chain   []v1alpha1.Method
		verdict detectors.Verdict
		want    []string
	}{
		{"dead node skips the executor", []v1alpha1.Method{exec, ipmi}, detectors.Dead, []string{"ipmi"}},
		{"dead node, power-off only", []v1alpha1.Method{ipmi}, detectors.Dead, []string{"ipmi"}},
		{"dead node, executor only: nothing", []v1alpha1.Method{exec}, detectors.Dead, nil},
		{"partitioned node: executor first, then power-off", []v1alpha1.Method{exec, ipmi}, detectors.Partitioned, []string{"executor", "ipmi"}},
		{"partitioned node, power-off only: never blind", []v1alpha1.Method{ipmi}, detectors.Partitioned, nil},
		{"kubelet down, power-off before executor: never blind", []v1alpha1.Method{ipmi, exec}, detectors.KubeletDown, nil},
		{"kubelet down, executor only", []v1alpha1.Method{exec}, detectors.KubeletDown, []string{"executor"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, names(methodsFor(tt.chain, tt.verdict))); diff != "" {
				t.Errorf("methods (-want +got):\n%s", diff)
			}
		})
	}
}
