package fencing

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/fake"
)

// setLevels puts the fence's methods named in names into level.
func setLevels(t *testing.T, w *world, level string, names ...string) {
	t.Helper()
	nf := &v1alpha1.NodeFence{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	for i := range nf.Spec.Methods {
		if slices.Contains(names, nf.Spec.Methods[i].Name) {
			nf.Spec.Methods[i].Level = level
		}
	}
	if err := w.c.Update(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
}

// stepsOf is the record's steps as "Name/method" for the method's steps.
func confirmedMethods(nf *v1alpha1.NodeFence) []string {
	var out []string
	for _, s := range nf.Status.Steps {
		if isConfirmStep(s.Name) && s.State == v1alpha1.StepSucceeded {
			out = append(out, s.Method)
		}
	}
	return out
}

// TestAllOfLevels: the methods of a level must all be confirmed before anything is released;
// one that fails skips the rest of its level and hands over to the next level, or fails the
// fence with nothing released. The world's level is the Executor AND a power-off (ipmi), with a
// second power-off (backup) as the next level where the case has one.
func TestAllOfLevels(t *testing.T) {
	auth := providers.NewError(providers.ReasonAuthFailed, errors.New("RAKP 2 HMAC is invalid"))
	for _, tc := range []struct {
		name      string
		methods   []string
		setup     func(*world)
		released  bool
		confirmed []string // the methods confirmed, in order
	}{
		{"level-all-confirmed", []string{"executor", "ipmi"}, func(w *world) {
			// The power-off confirms a few passes after the Executor: the record shows the level
			// half confirmed in between.
			w.power.SetStatus(&providers.Status{State: providers.InProgress, Reason: "PowerStillOn"})
		}, true, []string{"executor", "ipmi"}},
		{"level-second-fails", []string{"executor", "ipmi"}, func(w *world) { w.power.InjectError(fake.MethodFence, auth) }, false, []string{"executor"}},
		{"level-second-fails-escalates", []string{"executor", "ipmi", "backup"}, func(w *world) { w.power.InjectError(fake.MethodFence, auth) }, true,
			[]string{"executor", "backup"}},
		{"level-first-fails-skips-level", []string{"executor", "ipmi", "backup"}, func(w *world) {
			w.agent.SetStatus(&providers.Status{State: providers.Failed, Reason: providers.ReasonExecutorFailed})
		}, true, []string{"backup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.methods...)
			setLevels(t, w, "storage-and-power", "executor", "ipmi")
			tc.setup(w)
			// Before the level's last confirmation, the node is not fenced and nothing is released.
			halfway := 0
			w.tick = func(nf *v1alpha1.NodeFence) {
				if slices.Equal(confirmedMethods(nf), []string{"executor"}) {
					if halfway++; halfway == 3 {
						w.power.SetStatus(nil)
					}
					c := apimeta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionFenced)
					if want := "level storage-and-power needs all of executor, ipmi confirmed"; c == nil || c.Status != "False" || !strings.Contains(c.Message, want) {
						t.Errorf("half way, Fenced condition %+v; want False saying %q", c, want)
					}
				}
				if slices.Contains(confirmedMethods(nf), "ipmi") || slices.Contains(confirmedMethods(nf), "backup") {
					return
				}
				if Confirmed(nf) || nf.Status.Phase == v1alpha1.PhaseFenced || nf.Status.FencedTime != nil {
					t.Errorf("fence counted confirmed with only %v of its level confirmed: phase %s", confirmedMethods(nf), nf.Status.Phase)
				}
				for _, s := range nf.Status.Steps {
					if !isFenceStep(s.Name) {
						t.Errorf("release step %s taken with only %v of the level confirmed", s.Name, confirmedMethods(nf))
					}
				}
			}
			nf := w.run(t)
			checkGolden(t, tc.name, goldenTrace(nf))
			checkReleased(t, w, tc.released)
			if tc.name == "level-all-confirmed" && halfway < 3 {
				t.Errorf("the record showed the level half confirmed on %d passes, want 3", halfway)
			}
			if got := confirmedMethods(nf); !slices.Equal(got, tc.confirmed) {
				t.Errorf("methods confirmed %v, want %v", got, tc.confirmed)
			}
		})
	}
}

// TestDeadNodeSkipsLevelsNeedingTheAgent: a Dead node's chain drops a method that needs its agent
// and, with it, the rest of that method's level, which without it is not what the policy asked
// to be all confirmed.
func TestDeadNodeSkipsLevelsNeedingTheAgent(t *testing.T) {
	chain := []v1alpha1.Method{
		{Name: "executor", Type: v1alpha1.MethodExecutor, Level: "both"},
		{Name: "ipmi", Type: v1alpha1.MethodIPMI, Level: "both"},
		{Name: "backup", Type: v1alpha1.MethodIPMI},
	}
	var names []string
	for _, m := range methodsFor(chain, "Dead") {
		names = append(names, m.Name)
	}
	if !slices.Equal(names, []string{"backup"}) {
		t.Errorf("Dead node's chain %v, want [backup]", names)
	}
}

func TestLevelSpan(t *testing.T) {
	ms := []v1alpha1.Method{{Name: "a"}, {Name: "b", Level: "x"}, {Name: "c", Level: "x"}, {Name: "d", Level: "x"}, {Name: "e", Level: "y"}, {Name: "f"}}
	for i, want := range [][2]int{{0, 0}, {1, 3}, {1, 3}, {1, 3}, {4, 4}, {5, 5}} {
		if f, l := levelSpan(ms, i); f != want[0] || l != want[1] {
			t.Errorf("levelSpan(%d) = %d, %d; want %v", i, f, l, want)
		}
	}
}

// TestLevelOrder: a level is taken where its first method is listed, its methods in order.
func TestLevelOrder(t *testing.T) {
	chain := []v1alpha1.Method{{Name: "storage", Level: "both"}, {Name: "executor"}, {Name: "power", Level: "both"},
		{Name: "cloud", Level: "late"}, {Name: "backup"}, {Name: "detach", Level: "late"}}
	var got []string
	for _, m := range levelOrder(chain) {
		got = append(got, m.Name)
	}
	if want := []string{"storage", "power", "executor", "cloud", "detach", "backup"}; !slices.Equal(got, want) {
		t.Errorf("levelOrder = %v, want %v", got, want)
	}
}

// TestSplitLevelInARecordReleasesNothing: a record whose level is split by another method (not
// written by Palisade, which orders a fence's methods by level) is never released on part of
// the level: the first part's confirmation does not count, and the fence fails.
func TestSplitLevelInARecordReleasesNothing(t *testing.T) {
	w := newWorld(t, "ipmi", "executor", "backup")
	setLevels(t, w, "split", "ipmi", "backup")
	nf := w.run(t)
	if Confirmed(nf) || nf.Status.Phase != v1alpha1.PhaseFailed {
		t.Errorf("phase %s, confirmed %v; want Failed and not confirmed", nf.Status.Phase, Confirmed(nf))
	}
	checkGolden(t, "level-split-in-record", goldenTrace(nf))
	checkReleased(t, w, false)
}
