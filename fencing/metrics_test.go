package fencing

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// palisade_fence_oldest_in_progress_seconds is the age of the oldest fence under way: fences
// released, failed, recovered or in dry run do not count, and it falls to 0 when none is under
// way (the PalisadeFenceStuck alert reads it).
func TestOldestFenceInProgress(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	saved := fenceStates
	fenceStates = &stateCollector{nodes: map[string]fenceState{}, now: func() time.Time { return now }}
	t.Cleanup(func() { fenceStates = saved })
	fence := func(name string, age time.Duration, phase v1alpha1.Phase, dryRun bool) *v1alpha1.NodeFence {
		nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))}}
		nf.Spec.DryRun, nf.Status.Phase = dryRun, phase
		return nf
	}
	for _, nf := range []*v1alpha1.NodeFence{
		fence("releasing", 40*time.Minute, v1alpha1.PhaseReleasing, false),
		fence("fencing", 5*time.Minute, v1alpha1.PhaseFencing, false),
		fence("released", 3*time.Hour, v1alpha1.PhaseReleased, false),
		fence("failed", 3*time.Hour, v1alpha1.PhaseFailed, false),
		fence("recovered", 3*time.Hour, v1alpha1.PhaseRecovered, false),
		fence("dry-run", 3*time.Hour, v1alpha1.PhasePending, true),
	} {
		fenceStates.observe(nf)
	}
	if got := gauge(t, "palisade_fence_oldest_in_progress_seconds", ""); got != 2400 {
		t.Errorf("oldest fence in progress %vs, want 2400s (the Releasing fence)", got)
	}
	fenceStates.observe(fence("releasing", 40*time.Minute, v1alpha1.PhaseReleased, false))
	if got := gauge(t, "palisade_fence_oldest_in_progress_seconds", ""); got != 300 {
		t.Errorf("oldest fence in progress %vs once the oldest released, want 300s", got)
	}
	fenceStates.forget("fencing")
	if got := gauge(t, "palisade_fence_oldest_in_progress_seconds", ""); got != 0 {
		t.Errorf("oldest fence in progress %vs with none under way, want 0", got)
	}
}
