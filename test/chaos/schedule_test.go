package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The same seed gives the same schedule; different seeds give different ones.
func TestPlanIsReproducible(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		a, b := Plan(seed, Options{}), Plan(seed, Options{})
		if diff := cmp.Diff(a, b); diff != "" {
			t.Fatalf("seed %d drew two schedules (-first +second):\n%s", seed, diff)
		}
	}
	distinct := map[string]bool{}
	for seed := uint64(0); seed < 50; seed++ {
		distinct[Plan(seed, Options{}).String()] = true
	}
	if len(distinct) < 45 {
		t.Errorf("50 seeds drew only %d distinct schedules", len(distinct))
	}
}

// Over many seeds every kind is drawn, and every fault keeps to the options' bounds.
func TestPlanDrawsEveryKindWithinBounds(t *testing.T) {
	o := Options{Machines: 3, Window: 40 * time.Second, MaxFaults: 4}
	seen := map[Kind]int{}
	counts := map[int]int{}
	for seed := uint64(0); seed < 2000; seed++ {
		s := Plan(seed, o)
		counts[len(slices.DeleteFunc(slices.Clone(s.Faults), func(f Fault) bool { return f.Companion }))]++ // companions come on top
		for i, f := range s.Faults {
			if !f.Companion { // companions are counted apart (TestLeaderFaultsComeWithAFence)
				seen[f.Kind]++
			}
			if i > 0 && f.At < s.Faults[i-1].At {
				t.Fatalf("seed %d: faults out of order: %s", seed, s)
			}
			if f.At < 0 || f.At >= o.Window {
				t.Errorf("seed %d: %s strikes outside the window %s", seed, f, o.Window)
			}
			if got, want := f.Machine > 0, f.Kind.strikesMachine(); got != want {
				t.Errorf("seed %d: %s: machine %d", seed, f, f.Machine)
			}
			if f.Machine > o.Machines || f.Peer > o.Machines {
				t.Errorf("seed %d: %s: no such machine", seed, f)
			}
			if f.Kind == PeerCut && (f.Peer == 0 || f.Peer == f.Machine) {
				t.Errorf("seed %d: %s: a peer cut needs another machine", seed, f)
			}
			if f.leader() != (f.Step != "") {
				t.Errorf("seed %d: %s: step %q", seed, f, f.Step)
			}
			if f.Kind == LeaderPause {
				if f.For < 2*time.Second || f.For > 15*time.Second {
					t.Errorf("seed %d: %s: a pause of %s", seed, f, f.For)
				}
			} else if f.For != 0 && (!f.Kind.heals() || f.For < 5*time.Second || f.For >= time.Minute) {
				t.Errorf("seed %d: %s: length %s", seed, f, f.For)
			}
		}
	}
	for _, k := range append(Kinds, LeaderPause) {
		if seen[k] < 50 {
			t.Errorf("kind %s drawn %d times in 2000 runs", k, seen[k])
		}
	}
	for n := 1; n <= o.MaxFaults; n++ {
		if counts[n] == 0 {
			t.Errorf("no run drew %d faults: %v", n, counts)
		}
	}
	if counts[0] > 0 || counts[o.MaxFaults+1] > 0 {
		t.Errorf("fault counts outside 1..%d: %v", o.MaxFaults, counts)
	}
}

// Drawing leader pauses, and the leader faults' companions, left every other draw of a seed as
// it was: these schedules were drawn before (the chaos log of 2026-11-30, seeds 14101–14106),
// and read with the pauses as the kills they were and without the companions, they are drawn
// the same; one of them now pauses the leader.
func TestLeaderPausesKeepEarlierDraws(t *testing.T) {
	before := map[uint64]string{
		14101: "seed 14101: controller-api-cut from +27.305555025s until the heal; leader-kill at step VerifyFenced from +34.019035328s until the heal; kubelet-kill machine-2 from +36.32529938s for 46s",
		14103: "seed 14103: control-plane-cut machine-1 from +21.487293395s until the heal; leader-kill at step PowerOff from +33.46137203s until the heal",
		14104: "seed 14104: agent-kill machine-2 from +589.044337ms until the heal; slow-bmc machine-2 delay 4s from +25.992762177s until the heal",
		14105: "seed 14105: leader-kill at step ReleaseAttachments from +3.949195793s until the heal; peer-cut machine-1<->machine-3 from +4.871605903s until the heal; controller-api-cut from +35.862968319s for 30s",
		14106: "seed 14106: lying-bmc machine-2 from +30.541560379s until the heal; leader-kill at step DeletePods from +38.931516311s until the heal",
	}
	pauses := 0
	for seed, want := range before {
		s := Plan(seed, Options{Machines: 3, Window: window, MaxFaults: 3}) // as the runner draws
		s.Faults = slices.DeleteFunc(s.Faults, func(f Fault) bool { return f.Companion })
		for i, f := range s.Faults {
			if f.Kind == LeaderPause {
				pauses++
				s.Faults[i].Kind, s.Faults[i].For = LeaderKill, 0
			}
		}
		if got := s.String(); got != want {
			t.Errorf("seed %d, pauses read as kills:\n%s\nwant (drawn before pauses)\n%s", seed, got, want)
		}
	}
	if pauses == 0 {
		t.Errorf("none of the 4 leader kills of these seeds is drawn as a pause now")
	}
}

// A leader fault in a run whose faults give no right to fence any machine comes with a
// companion that gets a fence to its step: a power loss for a power method's steps, a killed
// kubelet for the Executor's, either for a release step, from the leader fault's moment until
// the heal, of a machine no other fault strikes. A run with a fault that may fence a machine
// gets none (the storm guard would hold back a second machine's fence).
func TestLeaderFaultsComeWithAFence(t *testing.T) {
	o := Options{Machines: 3, Window: window, MaxFaults: 3}
	leaders, companions := 0, 0
	for seed := uint64(0); seed < 2000; seed++ {
		s := Plan(seed, o)
		drawn := slices.DeleteFunc(slices.Clone(s.Faults), func(f Fault) bool { return f.Companion })
		held, struck := false, map[int]bool{}
		for _, f := range drawn {
			held = held || f.mayFence()
			struck[f.Machine], struck[f.Peer] = true, true
		}
		free := false
		for m := 1; m <= o.Machines; m++ {
			free = free || !struck[m]
		}
		var comps []Fault
		for _, f := range s.Faults {
			if f.Companion {
				comps = append(comps, f)
			}
		}
		companions += len(comps)
		if len(comps) > 1 || len(comps) == 1 && (held || !free) {
			t.Errorf("seed %d: %d companions in a run with a fault that may fence a machine (%t) or no machine free (%t): %s", seed, len(comps), held, !free, s)
		}
		for _, c := range comps {
			if c.For != 0 || struck[c.Machine] || c.Machine < 1 || c.Machine > o.Machines || (c.Kind != PowerLoss && c.Kind != KubeletKill) {
				t.Errorf("seed %d: companion %s: want a power loss or a killed kubelet, until the heal, of a machine no other fault strikes: %s", seed, c, s)
			}
		}
		// The companion is drawn for one of the run's leader faults: from its moment on, of a
		// kind that gets a fence to its step.
		reaches := func(f Fault) bool {
			kinds := []Kind{PowerLoss, KubeletKill}
			switch f.Step {
			case "PowerOff", "ConfirmOff":
				kinds = []Kind{PowerLoss}
			case "Terminate":
				kinds = []Kind{KubeletKill}
			}
			return slices.ContainsFunc(comps, func(c Fault) bool { return slices.Contains(kinds, c.Kind) && c.At == f.At })
		}
		ofRun, reached := 0, false // the run's leader faults; whether the companion reaches one's step
		for _, f := range s.Faults {
			if f.leader() {
				ofRun++
				reached = reached || reaches(f)
			}
		}
		leaders += ofRun
		if ofRun == 0 && len(comps) > 0 {
			t.Errorf("seed %d: a companion in a run with no leader fault: %s", seed, s)
		}
		if ofRun > 0 && !held && free && !reached {
			t.Errorf("seed %d: no companion that gets a fence to a leader fault's step from its moment on: %s", seed, s)
		}
	}
	if leaders < 300 || companions < leaders/3 {
		t.Errorf("2000 seeds drew %d leader faults and %d companions", leaders, companions)
	}
}

// The fixed seeds of make test draw what they drew before companions (none of them gets one),
// and seeds with a companion draw what they drew when companions came: a change to the draw
// changes what a seed replays, and what make test runs.
func TestSchedulesStayAsDrawn(t *testing.T) {
	want := map[uint64]string{
		10:    "seed 10: power-loss machine-3 from +9.204847246s for 25s; control-plane-cut machine-3 from +13.49181821s for 29s; controller-api-cut from +30.438474695s until the heal",
		13:    "seed 13: power-loss machine-2 from +9.486256034s until the heal; leader-kill at step PowerOff from +28.530837786s until the heal",
		26:    "seed 26: lying-bmc machine-3 from +12.235422542s until the heal; agent-kill machine-1 from +26.128193334s for 29s; kubelet-kill machine-2 from +36.712794559s until the heal",
		40:    "seed 40: control-plane-cut machine-1 from +23.375305852s until the heal; peer-cut machine-3<->machine-2 from +25.505930698s until the heal; etcd-cut from +36.588214761s for 51s",
		56:    "seed 56: slow-bmc machine-1 delay 6s from +23.294942963s until the heal; control-plane-cut machine-1 from +24.964595759s for 22s; slow-bmc machine-1 delay 7s from +26.000640047s until the heal",
		40033: "seed 40033: leader-kill at step ConfirmOff from +4.910564985s until the heal; power-loss machine-2 from +4.910564985s until the heal (for the leader fault); peer-cut machine-1<->machine-3 from +33.613301512s until the heal; etcd-cut from +35.001187319s until the heal",
		40099: "seed 40099: slow-bmc machine-2 delay 8s from +1.514191562s until the heal; leader-pause at step ReleaseAttachments from +17.940524172s for 14s; kubelet-kill machine-1 from +17.940524172s until the heal (for the leader fault)", // machine-1 of the two free
		40042: "seed 40042: leader-kill at step Taint from +11.822604605s until the heal; kubelet-kill machine-1 from +11.822604605s until the heal (for the leader fault)",
	}
	for seed, w := range want {
		if got := Plan(seed, Options{Machines: 3, Window: window, MaxFaults: 3}).String(); got != w {
			t.Errorf("seed %d draws\n%s\nwant\n%s", seed, got, w)
		}
	}
}

// A single machine has no peer: a peer cut is never drawn for it.
func TestPlanOneMachineHasNoPeerCut(t *testing.T) {
	for seed := uint64(0); seed < 500; seed++ {
		for _, f := range Plan(seed, Options{Machines: 1}).Faults {
			if f.Kind == PeerCut {
				t.Fatalf("seed %d drew %s on a one-machine cluster", seed, f)
			}
		}
	}
}

func TestMayFence(t *testing.T) {
	s := Schedule{Faults: []Fault{
		{Kind: PowerLoss, Machine: 1},
		{Kind: PeerCut, Machine: 2, Peer: 3},
		{Kind: AgentKill, Machine: 3},
		{Kind: KubeletKill, Machine: 3},
		{Kind: EtcdCut},
		{Kind: LyingBMC, Machine: 2},
	}}
	if diff := cmp.Diff(map[int]bool{1: true, 3: true}, s.MayFence()); diff != "" {
		t.Errorf("MayFence (-want +got):\n%s", diff)
	}
}

func TestScheduleReadsAndReplays(t *testing.T) {
	s := Schedule{Seed: 42, Faults: []Fault{
		{Kind: PeerCut, Machine: 1, Peer: 2, At: 3 * time.Second, For: 10 * time.Second},
		{Kind: LeaderKill, Step: "Taint", At: 7 * time.Second},
		{Kind: SlowBMC, Machine: 3, Delay: 4 * time.Second, At: 9 * time.Second},
	}}
	want := "seed 42: peer-cut machine-1<->machine-2 from +3s for 10s; leader-kill at step Taint from +7s until the heal; slow-bmc machine-3 delay 4s from +9s until the heal"
	if got := s.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
	if got, want := s.Replay(), "make chaos RUNS=1 SEED=42"; got != want {
		t.Errorf("Replay() = %q, want %q", got, want)
	}
	s.SelfFence = true
	if got, want := s.String(), want+"; agents fence themselves, SelfFence first"; got != want {
		t.Errorf("String() of a SelfFence run =\n%s\nwant\n%s", got, want)
	}
	if got, want := s.Replay(), "make chaos RUNS=1 SEED=42 SELF_FENCE=1"; got != want {
		t.Errorf("Replay() of a SelfFence run = %q, want %q", got, want)
	}
}

// Quiet is the latest moment a fault strikes or ends, whichever faults last until the heal.
func TestQuiet(t *testing.T) {
	s := Schedule{Faults: []Fault{
		{Kind: PowerLoss, At: 5 * time.Second, For: 50 * time.Second},
		{Kind: KubeletKill, At: 30 * time.Second},
		{Kind: EtcdCut, At: 35 * time.Second, For: 10 * time.Second},
	}}
	if got, want := s.Quiet(), 55*time.Second; got != want {
		t.Errorf("Quiet = %s, want %s (the power loss ends last)", got, want)
	}
	s.Faults = s.Faults[1:]
	if got, want := s.Quiet(), 45*time.Second; got != want {
		t.Errorf("Quiet = %s, want %s (the etcd cut ends last)", got, want)
	}
	s.Faults = s.Faults[:1]
	if got, want := s.Quiet(), 30*time.Second; got != want {
		t.Errorf("Quiet = %s, want %s (a fault until the heal counts when it strikes)", got, want)
	}
}

// Overlapping holds on one key: the first takes it down, only the last to end brings it back;
// another key is counted apart.
func TestHoldsOverlap(t *testing.T) {
	var h holds
	steps := []struct {
		op   string
		key  string
		want bool
	}{
		{"take", "node-3", true}, {"take", "node-3", false}, {"take", "node-1", true},
		{"give", "node-3", false}, {"give", "node-1", true}, {"give", "node-3", true},
		{"take", "node-3", true},
	}
	for i, s := range steps {
		got := h.take
		if s.op == "give" {
			got = h.give
		}
		if g := got(s.key); g != s.want {
			t.Errorf("step %d: %s(%s) = %t, want %t", i, s.op, s.key, g, s.want)
		}
	}
}

// A regression strikes only faults that give no right to fence (so any fence it draws is one of
// a healthy node), in order, under a unique name that its replay command names.
func TestRegressionsAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Regressions {
		if s.Name == "" || seen[s.Name] {
			t.Errorf("regression %q: want a unique, non-empty name", s.Name)
		}
		seen[s.Name] = true
		if !slices.IsSortedFunc(s.Faults, func(a, b Fault) int { return int(a.At - b.At) }) {
			t.Errorf("%s: faults not ordered by At", s)
		}
		if got, want := s.Replay(), "make chaos REGRESSION="+s.Name; got != want {
			t.Errorf("%s: Replay() = %q, want %q", s.Name, got, want)
		}
		if !strings.HasPrefix(s.String(), "regression "+s.Name+": ") {
			t.Errorf("String() = %q, want it to name the regression", s)
		}
		// A path written for a regression fences only machines its faults give a right to.
		for m := range s.Fenced {
			if !s.MayFence()[m] {
				t.Errorf("%s: wants machine-%d fenced, which none of its faults allows (MayFence %v)", s.Name, m, s.MayFence())
			}
		}
	}
	i := slices.IndexFunc(Regressions, func(s Schedule) bool { return s.Name == "agent-lost-peers-cut" })
	if i < 0 {
		t.Fatal("no regression agent-lost-peers-cut (seed 1201's agent killed while its peers were cut)")
	}
	if got := Regressions[i].MayFence(); len(got) != 0 {
		t.Errorf("agent-lost-peers-cut: MayFence = %v, want none: the machine stays healthy, its kubelet renewing", got)
	}
}
