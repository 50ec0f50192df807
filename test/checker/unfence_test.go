package checker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// nodeWrite is a write of node's status (by its kubelet) or of its spec (by the controller),
// whose response shows the node with boot, Ready as ready, and the out-of-service taint when
// tainted, at resourceVersion at (later writes, later versions).
func nodeWrite(at int, sub, node, boot string, ready, tainted bool) Event {
	user, taints := "system:node:"+node, ""
	if sub == "" {
		user = controller
	}
	if tainted {
		taints = `{"key":"node.kubernetes.io/out-of-service","effect":"NoExecute"}`
	}
	readiness := "False"
	if ready {
		readiness = "True"
	}
	e := ev(at, "patch", user, "", "nodes", node, "", fmt.Sprintf(
		`{"metadata":{"resourceVersion":"%d"},"spec":{"taints":[%s]},"status":{"nodeInfo":{"bootID":%q},"conditions":[{"type":"Ready","status":%q}]}}`, at, taints, boot, readiness))
	e.ObjectRef.Subresource = sub
	return e
}

// fenceWrite is a NodeFence of node created (verb "create") or its status written in phase,
// confirmed (Fenced=True) from phase Fenced on.
func fenceWrite(at int, verb, name, node, phase string) Event {
	fenced := "False"
	if phase == "Fenced" || phase == "Releasing" || phase == "Released" || phase == "Recovered" {
		fenced = "True"
	}
	e := ev(at, verb, controller, "fencing.palisade.dev", "nodefences", name, "",
		fmt.Sprintf(`{"spec":{"nodeName":%q},"status":{"phase":%q,"conditions":[{"type":"Fenced","status":%q}]}}`, node, phase, fenced))
	if verb != "create" {
		e.ObjectRef.Subresource = "status"
	}
	return e
}

func TestCleanUnfence(t *testing.T) {
	// The node runs boot b1, is fenced and released with the taint on; then what happens
	// before the taint comes off varies.
	fenced := func(phase string) []Event {
		return []Event{
			nodeWrite(0, "status", "n1", "b1", true, false),
			fenceWrite(1000, "create", "n1", "n1", ""),
			nodeWrite(1500, "status", "n1", "b1", false, false), // NotReady: the node lifecycle controller
			nodeWrite(2000, "", "n1", "b1", false, true),
			fenceWrite(3000, "patch", "n1", "n1", phase),
		}
	}
	for name, tc := range map[string]struct {
		evs    []Event
		want   []string // the violations' texts hold these, one each
		judged int      // how many unfences were judged
	}{
		"rebooted and Ready": {judged: 1, evs: append(fenced("Released"),
			nodeWrite(4000, "status", "n1", "b2", true, true),
			nodeWrite(5000, "", "n1", "b2", true, false))},
		"recorded Recovered before the taint went": {judged: 1, evs: append(fenced("Recovered"),
			nodeWrite(4000, "status", "n1", "b2", true, true),
			nodeWrite(5000, "", "n1", "b2", true, false))},
		"back with the boot it had when fenced": {judged: 1, evs: append(fenced("Released"),
			nodeWrite(4000, "status", "n1", "b1", true, true),
			nodeWrite(5000, "", "n1", "b1", true, false)),
			want: []string{"had not rebooted: boot ID b1"}},
		"back with the boot it had, the removal logged before the status write": {judged: 1, evs: append(fenced("Released"),
			nodeWrite(5000, "", "n1", "b1", true, false),
			nodeWrite(4000, "status", "n1", "b1", true, true)),
			want: []string{"had not rebooted: boot ID b1"}},
		"rebooted, never Ready": {judged: 1, evs: append(fenced("Released"),
			nodeWrite(4000, "status", "n1", "b2", false, true),
			nodeWrite(5000, "", "n1", "b2", false, false)),
			want: []string{"not back"}},
		// A recovery decided while the node was back is finished after it fell NotReady again
		// (a new leader finishing it): the node did reboot and come back.
		"rebooted, Ready, NotReady again when the taint goes": {judged: 1, evs: append(fenced("Released"),
			nodeWrite(4000, "status", "n1", "b2", true, true),
			nodeWrite(4500, "status", "n1", "b2", false, true),
			nodeWrite(5000, "", "n1", "b2", false, false))},
		"back in a boot begun before the confirmation": {judged: 1, evs: []Event{
			nodeWrite(0, "status", "n1", "b1", true, false),
			fenceWrite(1000, "create", "n1", "n1", ""),
			nodeWrite(1500, "status", "n1", "b2", true, false), // rebooted while the fence ran
			fenceWrite(1800, "patch", "n1", "n1", "Fenced"),
			nodeWrite(2000, "", "n1", "b2", false, true),
			fenceWrite(3000, "patch", "n1", "n1", "Released"),
			nodeWrite(4000, "status", "n1", "b2", true, true),
			nodeWrite(5000, "", "n1", "b2", true, false)},
			want: []string{"had not rebooted: boot ID b2"}},
		"a boot after the confirmation is clean": {judged: 1, evs: []Event{
			nodeWrite(0, "status", "n1", "b1", true, false),
			fenceWrite(1000, "create", "n1", "n1", ""),
			fenceWrite(1800, "patch", "n1", "n1", "Fenced"),
			nodeWrite(1900, "status", "n1", "b2", true, false), // the power cycle of the fence
			nodeWrite(2000, "", "n1", "b2", false, true),
			fenceWrite(3000, "patch", "n1", "n1", "Released"),
			nodeWrite(5000, "", "n1", "b2", true, false)}},
		// The API server logs a write as it completes: a status write committed before the
		// removal (still tainted) may be logged after it, and must not read as a second removal
		// judged on a later state.
		"an older write logged late": {judged: 1, evs: append(fenced("Released"),
			nodeWrite(4000, "status", "n1", "b1", true, true),
			nodeWrite(5000, "", "n1", "b1", true, false),
			nodeWrite(4800, "status", "n1", "b1", true, true),
			fenceWrite(5500, "patch", "n1", "n1", "Recovered"),
			nodeWrite(6000, "status", "n1", "b1", true, false)),
			want: []string{"at 05:00:05.000"}},
		"its boot never reported": {judged: 1, evs: []Event{
			fenceWrite(1000, "create", "n1", "n1", ""),
			nodeWrite(2000, "", "n1", "", false, true),
			fenceWrite(3000, "patch", "n1", "n1", "Released"),
			nodeWrite(5000, "", "n1", "", true, false)},
			want: []string{"no reboot can be shown"}},
		"disproved during its release: its own taint goes": {judged: 0, evs: append(fenced("Releasing"),
			nodeWrite(4000, "status", "n1", "b1", true, true),
			nodeWrite(5000, "", "n1", "b1", true, false))},
		"its NodeFence deleted first": {judged: 0, evs: append(fenced("Released"),
			ev(3500, "delete", "admin", "fencing.palisade.dev", "nodefences", "n1", "", ""),
			nodeWrite(5000, "", "n1", "b1", true, false))},
		"another node's reboot proves nothing": {judged: 1, evs: append(fenced("Released"),
			nodeWrite(3500, "status", "n2", "b9", true, false),
			nodeWrite(5000, "", "n1", "b1", true, false)),
			want: []string{"node n1"}},
		// Fenced again after a recovery: the second fence's boot is the one it began with.
		"fenced again, back without a reboot": {judged: 2, evs: append(append(fenced("Released"),
			nodeWrite(4000, "status", "n1", "b2", true, true),
			nodeWrite(5000, "", "n1", "b2", true, false),
			fenceWrite(5500, "patch", "n1", "n1", "Recovered"),
			ev(6000, "delete", controller, "fencing.palisade.dev", "nodefences", "n1", "", ""),
			fenceWrite(7000, "create", "n1", "n1", ""),
			nodeWrite(8000, "", "n1", "b2", false, true),
			fenceWrite(9000, "patch", "n1", "n1", "Released")),
			nodeWrite(10000, "status", "n1", "b2", true, true),
			nodeWrite(11000, "", "n1", "b2", true, false)),
			want: []string{"at 05:00:11.000", "boot ID b2"}},
		"a status write keeps the taint": {judged: 0, evs: append(fenced("Released"),
			nodeWrite(4000, "status", "n1", "b1", true, true))},
	} {
		t.Run(name, func(t *testing.T) {
			v := CleanUnfence(tc.evs)
			if judged, _ := JudgeUnfences(tc.evs); judged != tc.judged {
				t.Errorf("judged %d unfences, want %d", judged, tc.judged)
			}
			if len(tc.want) == 0 {
				if len(v) != 0 {
					t.Fatalf("want no violation, got %s", Report(v))
				}
				return
			}
			if diff := cmp.Diff([]string{"f CleanUnfence"}, checks(v)); diff != "" {
				t.Fatalf("(-want +got):\n%s\n%s", diff, Report(v))
			}
			for _, w := range tc.want {
				if !strings.Contains(v[0].Text, w) {
					t.Errorf("violation %q does not say %q", v[0].Text, w)
				}
			}
		})
	}
}

// Check runs (f) with the others.
func TestCheckRunsCleanUnfence(t *testing.T) {
	evs := []Event{
		nodeWrite(0, "status", "n1", "b1", true, false),
		fenceWrite(1000, "create", "n1", "n1", ""),
		nodeWrite(2000, "", "n1", "b1", false, true),
		fenceWrite(3000, "patch", "n1", "n1", "Released"),
		nodeWrite(5000, "", "n1", "b1", true, false),
	}
	v := Check(Input{Audit: evs, End: ms(6000)})
	if !strings.Contains(Report(v), "f CleanUnfence") {
		t.Errorf("Check did not run CleanUnfence: %s", Report(v))
	}
}
