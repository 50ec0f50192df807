package checker

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/test/witness"
)

var t0 = time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// trail is a session's writes every 100ms from from to to (ms).
func trail(session, pod, uid string, from, to int) []witness.Record {
	id := witness.Identity{Pod: pod, PodUID: uid, Node: "node-" + uid, BootID: "boot-" + uid}
	h := []witness.Record{{Kind: witness.KindOpen, Session: session, Identity: id, Arrival: ms(from)}}
	for at := from + 100; at <= to; at += 100 {
		h = append(h, witness.Record{Kind: witness.KindAppend, Session: session, Identity: id, Arrival: ms(at)})
	}
	return h
}

func checks(v []Violation) []string {
	var s []string
	for _, x := range v {
		s = append(s, x.Check)
	}
	return s
}

func TestOneCopy(t *testing.T) {
	for name, tc := range map[string]struct {
		history   [][]witness.Record
		tolerance time.Duration
		want      []string
	}{
		"one writer":                         {history: [][]witness.Record{trail("s1", "db-0", "a", 0, 2000)}},
		"a handover with a gap":              {history: [][]witness.Record{trail("s1", "db-0", "a", 0, 1000), trail("s2", "db-0", "b", 1100, 3000)}},
		"two copies overlapping by 50ms":     {history: [][]witness.Record{trail("s1", "db-0", "a", 0, 1000), trail("s2", "db-0", "b", 950, 3000)}, want: []string{"a OneCopy"}},
		"the old copy writing all along":     {history: [][]witness.Record{trail("s1", "db-0", "a", 0, 5000), trail("s2", "db-0", "b", 1000, 3000)}, want: []string{"a OneCopy"}},
		"within the tolerance":               {history: [][]witness.Record{trail("s1", "db-0", "a", 0, 1000), trail("s2", "db-0", "b", 950, 3000)}, tolerance: 100 * time.Millisecond},
		"different pods at once":             {history: [][]witness.Record{trail("s1", "db-0", "a", 0, 1000), trail("s2", "db-1", "b", 0, 1000)}},
		"the same pod's container restarted": {history: [][]witness.Record{trail("s1", "db-0", "a", 0, 1000), trail("s2", "db-0", "a", 1500, 2000)}},
	} {
		t.Run(name, func(t *testing.T) {
			var h []witness.Record
			for _, tr := range tc.history {
				h = append(h, tr...)
			}
			v := OneCopy(h, tc.tolerance)
			if diff := cmp.Diff(tc.want, checks(v)); diff != "" {
				t.Errorf("OneCopy (-want +got):\n%s\n%v", diff, v)
			}
		})
	}
}

// TestNoWriteAfterRemoval: a copy that writes after its pod's object was force-deleted (or
// deleted once marked Failed) outlived its release, even with no replacement writing beside it.
func TestNoWriteAfterRemoval(t *testing.T) {
	removal := func(at int, user, grace, phase string) Event {
		req := ""
		if grace != "" {
			req = `{"gracePeriodSeconds":` + grace + `}`
		}
		return ev(at, "delete", user, "", "pods", "db-0", req,
			fmt.Sprintf(`{"metadata":{"uid":"a"},"spec":{"nodeName":"node-a"},"status":{"phase":%q}}`, phase))
	}
	for name, tc := range map[string]struct {
		history []witness.Record
		evs     []Event
		want    []string
	}{
		"dead before its force deletion":      {trail("s1", "db-0", "a", 0, 1000), []Event{removal(1500, controller, "0", "Failed")}, nil},
		"a write in flight at the deletion":   {trail("s1", "db-0", "a", 0, 1900), []Event{removal(1000, controller, "0", "Running")}, nil},
		"writing on after its force deletion": {trail("s1", "db-0", "a", 0, 5000), []Event{removal(1000, controller, "0", "Running")}, []string{"a NoWriteAfterRemoval"}},
		"an operator's force deletion":        {trail("s1", "db-0", "a", 0, 5000), []Event{removal(1000, "kubernetes-admin", "0", "Running")}, []string{"a NoWriteAfterRemoval"}},
		"deleted once marked Failed, by the StatefulSet controller": {trail("s1", "db-0", "a", 0, 5000),
			[]Event{removal(1000, "system:serviceaccount:kube-system:statefulset-controller", "", "Failed")}, []string{"a NoWriteAfterRemoval"}},
		"a graceful deletion": {trail("s1", "db-0", "a", 0, 5000), []Event{removal(1000, controller, "30", "Running")}, nil},
		"writing on after it was marked Failed": {trail("s1", "db-0", "a", 0, 5000),
			[]Event{statusWrite(1000, controller, "db-0", "node-a", "Failed"), removal(4500, controller, "30", "Running")}, []string{"a NoWriteAfterRemoval"}},
		"marked Failed by its own kubelet":  {trail("s1", "db-0", "a", 0, 5000), []Event{statusWrite(1000, "system:node:node-a", "db-0", "node-a", "Failed")}, nil},
		"the kubelet's own final delete":    {trail("s1", "db-0", "a", 0, 5000), []Event{removal(1000, "system:node:node-a", "0", "Running")}, nil},
		"another copy of the name after it": {append(trail("s1", "db-0", "a", 0, 1000), trail("s2", "db-0", "b", 2000, 5000)...), []Event{removal(1000, controller, "0", "Failed")}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			v := NoWriteAfterRemoval(tc.history, tc.evs, time.Second)
			if diff := cmp.Diff(tc.want, checks(v)); diff != "" {
				t.Errorf("NoWriteAfterRemoval (-want +got):\n%s\n%v", diff, v)
			}
			for _, x := range v {
				if !strings.Contains(x.Text, "UID a") || !strings.Contains(x.Text, "released while it ran") {
					t.Errorf("violation %q does not name the copy and what it means", x.Text)
				}
			}
		})
	}
}

// TestAuditComplete: every pod UID that wrote, and every NodeFence the run listed, must have
// its creation in the audit log; an empty log passes nothing.
func TestAuditComplete(t *testing.T) {
	created := ev(0, "create", "system:serviceaccount:kube-system:statefulset-controller", "", "pods", "db-0", "", `{"metadata":{"uid":"a"},"spec":{}}`)
	h := append(trail("s1", "db-0", "a", 0, 500), trail("s2", "db-0", "b", 1000, 1500)...)
	for name, tc := range map[string]struct {
		evs    []Event
		fences []string
		want   int
	}{
		"all there":                  {[]Event{created, ev(1, "create", controller, "", "pods", "db-0", "", `{"metadata":{"uid":"b"}}`), fence(2, "create", "n1", "", "", "")}, []string{"n1"}, 0},
		"an empty log":               {nil, []string{"n1"}, 3},
		"a copy's creation missing":  {[]Event{created, fence(2, "create", "n1", "", "", "")}, []string{"n1"}, 1},
		"a fence's creation missing": {[]Event{created, ev(1, "create", controller, "", "pods", "db-0", "", `{"metadata":{"uid":"b"}}`)}, []string{"n1"}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			v := AuditComplete(h, tc.evs, tc.fences)
			if len(v) != tc.want {
				t.Errorf("AuditComplete = %v, want %d violations", v, tc.want)
			}
		})
	}
}

func TestReplicasReturn(t *testing.T) {
	h := append(trail("s1", "db-0", "a", 0, 5000), trail("s2", "db-1", "b", 0, 2000)...)
	v := ReplicasReturn(h, []string{"db-0", "db-1", "db-2"}, ms(3000))
	if diff := cmp.Diff([]string{"e ReplicasReturn", "e ReplicasReturn"}, checks(v)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if !strings.Contains(v[0].Text, "db-1") || !strings.Contains(v[1].Text, "db-2") || !strings.Contains(v[1].Text, "never") {
		t.Errorf("violations do not name the pods: %v", v)
	}
}

// ev builds an accepted audit event.
func ev(at int, verb, user, group, resource, name string, request, response string) Event {
	var e Event
	e.Stage, e.Verb, e.User.Username = "ResponseComplete", verb, user
	e.ObjectRef.APIGroup, e.ObjectRef.Resource, e.ObjectRef.Name = group, resource, name
	e.ResponseStatus.Code = 200
	e.StageTimestamp = ms(at)
	if request != "" {
		e.RequestObject = json.RawMessage(request)
	}
	if response != "" {
		e.ResponseObject = json.RawMessage(response)
	}
	return e
}

const controller = "system:serviceaccount:palisade:palisade-controller"

func taint(at int, node string) Event {
	return ev(at, "patch", controller, "", "nodes", node, "", `{"spec":{"taints":[{"key":"node.kubernetes.io/out-of-service","effect":"NoExecute"}]}}`)
}

func untainted(at int, node string) Event {
	return ev(at, "patch", controller, "", "nodes", node, "", `{"spec":{}}`)
}

func forceDelete(at int, user, pod, node string) Event {
	return ev(at, "delete", user, "", "pods", pod, `{"gracePeriodSeconds":0}`, fmt.Sprintf(`{"spec":{"nodeName":%q}}`, node))
}

// statusWrite is a merge patch of the pod's status by user, whose response shows phase.
func statusWrite(at int, user, pod, node, phase string) Event {
	req := fmt.Sprintf(`{"status":{"phase":%q,"conditions":[{"type":"DisruptionTarget","status":"True"}]}}`, phase)
	e := ev(at, "patch", user, "", "pods", pod, req, fmt.Sprintf(`{"metadata":{"uid":"a"},"spec":{"nodeName":%q},"status":{"phase":%q}}`, node, phase))
	e.ObjectRef.Subresource = "status"
	return e
}

func fence(at int, verb, node, phase, fenced, reason string) Event {
	conds := ""
	if fenced != "" {
		conds = fmt.Sprintf(`,"conditions":[{"type":"Fenced","status":%q,"reason":%q}]`, fenced, reason)
	}
	return ev(at, verb, controller, "fencing.palisade.dev", "nodefences", node, "",
		fmt.Sprintf(`{"spec":{"nodeName":%q},"status":{"phase":%q%s}}`, node, phase, conds))
}

func TestNoEarlyRelease(t *testing.T) {
	for name, tc := range map[string]struct {
		evs  []Event
		want []string
	}{
		"taint after a confirmed fence":        {evs: []Event{fence(0, "create", "n1", "", "", ""), fence(100, "update", "n1", "Fenced", "True", "PowerOff"), taint(200, "n1"), forceDelete(300, controller, "db-0", "n1")}},
		"taint before the confirmation":        {evs: []Event{fence(0, "create", "n1", "", "", ""), taint(50, "n1"), fence(100, "update", "n1", "Fenced", "True", "PowerOff")}, want: []string{"b NoEarlyRelease"}},
		"taint with no fence at all":           {evs: []Event{taint(50, "n1")}, want: []string{"b NoEarlyRelease"}},
		"a taint kept is one release":          {evs: []Event{taint(50, "n1"), taint(60, "n1")}, want: []string{"b NoEarlyRelease"}},
		"taken off and put on again":           {evs: []Event{taint(50, "n1"), untainted(60, "n1"), taint(70, "n1")}, want: []string{"b NoEarlyRelease", "b NoEarlyRelease"}},
		"force deletion by an operator":        {evs: []Event{forceDelete(300, "kubernetes-admin", "db-0", "n1")}, want: []string{"b NoEarlyRelease"}},
		"the kubelet's own final delete":       {evs: []Event{forceDelete(300, "system:node:n1", "db-0", "n1")}},
		"a graceful delete":                    {evs: []Event{ev(300, "delete", controller, "", "pods", "db-0", `{"gracePeriodSeconds":30}`, `{"spec":{"nodeName":"n1"}}`)}},
		"a fence of another node":              {evs: []Event{fence(100, "create", "n2", "Fenced", "True", "PowerOff"), taint(200, "n1")}, want: []string{"b NoEarlyRelease"}},
		"a confirmation taken back":            {evs: []Event{fence(100, "create", "n1", "Fenced", "True", "PowerOff"), fence(150, "update", "n1", "Fencing", "False", "NodeAliveAfterFence"), taint(200, "n1")}, want: []string{"b NoEarlyRelease"}},
		"a taint after the node was unfenced":  {evs: []Event{fence(100, "create", "n1", "Fenced", "True", "PowerOff"), taint(200, "n1"), untainted(300, "n1"), fence(300, "update", "n1", "Recovered", "True", "PowerOff"), taint(400, "n1")}, want: []string{"b NoEarlyRelease"}},
		"the fence deleted before":             {evs: []Event{fence(100, "create", "n1", "Fenced", "True", "PowerOff"), fence(150, "delete", "n1", "", "", ""), taint(200, "n1")}, want: []string{"b NoEarlyRelease"}},
		"attachment deleted by the controller": {evs: []Event{ev(200, "delete", controller, "storage.k8s.io", "volumeattachments", "va-1", "", `{"spec":{"nodeName":"n1"}}`)}, want: []string{"b NoEarlyRelease"}},
		"attachment detached by KCM":           {evs: []Event{ev(200, "delete", "system:kube-controller-manager", "storage.k8s.io", "volumeattachments", "va-1", "", `{"spec":{"nodeName":"n1"}}`)}},
		// The StatefulSet controller replaces a Failed pod at once: the mark is the release.
		"pod marked Failed before the confirmation": {evs: []Event{fence(0, "create", "n1", "", "", ""), statusWrite(50, controller, "db-0", "n1", "Failed")}, want: []string{"b NoEarlyRelease"}},
		"pod marked Failed after the confirmation":  {evs: []Event{fence(0, "create", "n1", "Fenced", "True", "PowerOff"), statusWrite(50, controller, "db-0", "n1", "Failed")}},
		"pod marked Failed by its kubelet":          {evs: []Event{statusWrite(50, "system:node:n1", "db-0", "n1", "Failed")}},
		"a status write that leaves it Running":     {evs: []Event{statusWrite(40, "system:node:n1", "db-0", "n1", "Running"), statusWrite(50, controller, "db-0", "n1", "Running")}},
		// Any write whose response turns the pod Failed, whatever the request's form.
		"a JSON patch that marks it Failed": {evs: []Event{func() Event {
			e := statusWrite(50, "kubernetes-admin", "db-0", "n1", "Failed")
			e.RequestObject = json.RawMessage(`[{"op":"replace","path":"/status/phase","value":"Failed"}]`)
			return e
		}()}, want: []string{"b NoEarlyRelease"}},
		// A pod Failed already (marked after a confirmation that was later taken back) written
		// again whole (node lifecycle's update of its Ready condition): no new release.
		"a write of a pod Failed already": {evs: []Event{fence(0, "create", "n1", "Fenced", "True", "PowerOff"), statusWrite(50, controller, "db-0", "n1", "Failed"),
			fence(60, "delete", "n1", "", "", ""), statusWrite(70, "system:serviceaccount:kube-system:node-controller", "db-0", "n1", "Failed")}},
	} {
		t.Run(name, func(t *testing.T) {
			v := NoEarlyRelease(tc.evs, []string{controller})
			if diff := cmp.Diff(tc.want, checks(v)); diff != "" {
				t.Errorf("NoEarlyRelease (-want +got):\n%s\n%v", diff, v)
			}
		})
	}
}

func TestNoHealthyFenced(t *testing.T) {
	evs := []Event{fence(0, "create", "n1", "", "", ""), fence(10, "create", "n2", "", "", ""), fence(20, "update", "n2", "Fenced", "True", "")}
	v := NoHealthyFenced(evs, map[string]time.Time{"n1": {}}, []PowerOff{{Node: "n1", At: ms(5)}, {Node: "n3", At: ms(6)}})
	if diff := cmp.Diff([]string{"c NoHealthyFenced", "c NoHealthyFenced"}, checks(v)); diff != "" {
		t.Fatalf("(-want +got):\n%s\n%v", diff, v)
	}
	if !strings.Contains(v[0].Text, "n2") || !strings.Contains(v[1].Text, "n3") {
		t.Errorf("violations do not name the healthy nodes: %v", v)
	}
	// A node the faults struck, fenced before the first of them struck it: a healthy node then.
	v = NoHealthyFenced(evs, map[string]time.Time{"n1": ms(1), "n2": ms(10)}, []PowerOff{{Node: "n1", At: ms(0)}, {Node: "n2", At: ms(10)}, {Node: "n2"}})
	if diff := cmp.Diff([]string{"c NoHealthyFenced", "c NoHealthyFenced"}, checks(v)); diff != "" {
		t.Fatalf("fenced before struck (-want +got):\n%s\n%v", diff, v)
	}
	for i, want := range []string{"NodeFence n1 created at 05:00:00.000", "power-off sent to node n1 at 05:00:00.000"} {
		if !strings.HasPrefix(v[i].Text, want) || !strings.Contains(v[i].Text, "before any fault struck it (the first at 05:00:00.001)") {
			t.Errorf("violation %q, want it to start %q and say when the node was first struck", v[i].Text, want)
		}
	}
	// A BMC that only counts its power-off commands gives no time: none is made up.
	v = NoHealthyFenced(nil, nil, []PowerOff{{Node: "n3"}})
	if want := "power-off sent to node n3, which no fault struck"; len(v) != 1 || v[0].Text != want {
		t.Errorf("a power-off without a time: %v, want %q", v, want)
	}
}

func TestFencesEnd(t *testing.T) {
	bound := 10 * time.Second
	created := fence(0, "create", "n1", "", "", "")
	released := func(at int) Event { return fence(at, "update", "n1", "Released", "True", "PowerOff") }
	for name, tc := range map[string]struct {
		evs     []Event
		outages []Outage
		want    []string
	}{
		"released in time":        {evs: []Event{created, released(5000)}},
		"failed with a reason":    {evs: []Event{created, fence(5000, "update", "n1", "Failed", "False", "BMCUnreachable")}},
		"failed without a reason": {evs: []Event{created, fence(5000, "update", "n1", "Failed", "False", "")}, want: []string{"d FencesEnd"}},
		"never ended":             {evs: []Event{created, fence(5000, "update", "n1", "Fencing", "", "")}, want: []string{"d FencesEnd"}},
		"ended too late":          {evs: []Event{created, released(15000)}, want: []string{"d FencesEnd"}},
		// The run ended before the fence's bound: it cannot be judged, and that is the run's fault.
		"still young at the end":                          {evs: []Event{fence(15000, "create", "n1", "", "", "")}, want: []string{"d FencesEnd"}},
		"open at the end, the controllers cut until then": {evs: []Event{created}, outages: []Outage{{From: ms(5000)}}, want: []string{"d FencesEnd"}},
		// The time the controllers could not reach the API server is not the fence's.
		"late, the controllers cut meanwhile": {evs: []Event{created, released(15000)}, outages: []Outage{{ms(2000), ms(9000)}}},
		"late, an outage before the fence":    {evs: []Event{fence(6000, "create", "n1", "", "", ""), released(17000)}, outages: []Outage{{ms(0), ms(5000)}}, want: []string{"d FencesEnd"}},
		"late, outages that overlap count once": {evs: []Event{created, released(17000)}, outages: []Outage{{ms(2000), ms(8000)}, {ms(3000), ms(8000)}},
			want: []string{"d FencesEnd"}},
		"late, two outages apart": {evs: []Event{created, released(17000)}, outages: []Outage{{ms(2000), ms(6000)}, {ms(10000), ms(14000)}}},
	} {
		t.Run(name, func(t *testing.T) {
			v := FencesEnd(tc.evs, bound, ms(20000), tc.outages)
			if diff := cmp.Diff(tc.want, checks(v)); diff != "" {
				t.Errorf("FencesEnd (-want +got):\n%s\n%v", diff, v)
			}
		})
	}
}
