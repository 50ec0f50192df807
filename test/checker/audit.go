package checker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"
)

// Event is the part of an audit.k8s.io/v1 Event the checks read.
type Event struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject  json.RawMessage `json:"requestObject"`
	ResponseObject json.RawMessage `json:"responseObject"`
	StageTimestamp time.Time       `json:"stageTimestamp"`
}

// ReadAudit reads the API server's audit log, keeping the writes it accepted (ResponseComplete
// with a 2xx code), in order.
func ReadAudit(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	defer f.Close()
	var evs []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("reading the audit log: line %d: %w", len(evs)+1, err)
		}
		if e.Stage == "ResponseComplete" && e.ResponseStatus.Code >= 200 && e.ResponseStatus.Code < 300 {
			evs = append(evs, e)
		}
	}
	return evs, sc.Err()
}

// The objects' fields the checks read, as plain JSON.
type (
	nodeObj struct {
		Spec struct {
			Taints []struct {
				Key string `json:"key"`
			} `json:"taints"`
		} `json:"spec"`
	}
	podObj struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
		Spec struct {
			NodeName string `json:"nodeName"`
		} `json:"spec"`
		Status struct {
			Phase string `json:"phase"`
		} `json:"status"`
	}
	deleteOptions struct {
		GracePeriodSeconds *int64 `json:"gracePeriodSeconds"`
	}
	attachmentObj struct {
		Spec struct {
			NodeName string `json:"nodeName"`
		} `json:"spec"`
	}
	fenceObj struct {
		Spec struct {
			NodeName string `json:"nodeName"`
		} `json:"spec"`
		Status struct {
			Phase      string `json:"phase"`
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
				Reason string `json:"reason"`
			} `json:"conditions"`
		} `json:"status"`
	}
)

const outOfServiceTaint = "node.kubernetes.io/out-of-service"

func (e Event) is(group, resource string) bool {
	return e.ObjectRef.APIGroup == group && e.ObjectRef.Resource == resource
}

func (e Event) at() string { return e.StageTimestamp.Format("15:04:05.000") }

func decode(raw json.RawMessage, into any) bool {
	return len(raw) > 0 && json.Unmarshal(raw, into) == nil
}

// fenced is the Fenced condition's status and reason.
func (f fenceObj) fenced() (status, reason string) {
	for _, c := range f.Status.Conditions {
		if c.Type == "Fenced" {
			return c.Status, c.Reason
		}
	}
	return "", ""
}

// release is what a write released, if anything: the node and how.
func release(e Event, tainted map[string]bool, releasers map[string]bool, ph phases) (node, what string) {
	if p, ok := ph.failedMark(e); ok {
		return p.Spec.NodeName, fmt.Sprintf("pod %s/%s marked Failed by %s", e.ObjectRef.Namespace, e.ObjectRef.Name, e.User.Username)
	}
	switch {
	case e.is("", "nodes") && e.ObjectRef.Subresource == "" && e.Verb != "delete":
		var n nodeObj
		if !decode(e.ResponseObject, &n) {
			return "", ""
		}
		has := false
		for _, t := range n.Spec.Taints {
			has = has || t.Key == outOfServiceTaint
		}
		was := tainted[e.ObjectRef.Name]
		tainted[e.ObjectRef.Name] = has
		if has && !was {
			return e.ObjectRef.Name, "out-of-service taint added by " + e.User.Username
		}
	case e.is("", "pods") && e.Verb == "delete":
		p, force, ok := podDeletion(e)
		if !ok || !force || p.Spec.NodeName == "" {
			return "", ""
		}
		return p.Spec.NodeName, fmt.Sprintf("pod %s/%s force-deleted by %s", e.ObjectRef.Namespace, e.ObjectRef.Name, e.User.Username)
	case e.is("storage.k8s.io", "volumeattachments") && e.Verb == "delete" && releasers[e.User.Username]:
		var a attachmentObj
		if decode(e.ResponseObject, &a) && a.Spec.NodeName != "" {
			return a.Spec.NodeName, fmt.Sprintf("VolumeAttachment %s deleted by %s", e.ObjectRef.Name, e.User.Username)
		}
	}
	return "", ""
}

// podDeletion reads a pod's deletion by anyone but its node's kubelet: the pod as deleted, and
// whether it was forced (grace period 0). ok is false for any other event, or a pod the
// response does not show.
func podDeletion(e Event) (p podObj, force, ok bool) {
	if !e.is("", "pods") || e.Verb != "delete" || e.ObjectRef.Subresource != "" ||
		!decode(e.ResponseObject, &p) || e.User.Username == "system:node:"+p.Spec.NodeName {
		return podObj{}, false, false
	}
	var opts deleteOptions
	force = decode(e.RequestObject, &opts) && opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds == 0
	return p, force, true
}

// phases follows each pod's phase (by UID) through the audit log's writes of pods, to tell a
// write that turns a pod Failed from one that finds it Failed already.
type phases map[string]string

// failedMark reads a write of a pod, by anyone but its node's kubelet, that turned its phase
// Failed (as the response shows it; whatever the request's form: merge or JSON patch, apply,
// or a whole update): a release as much as a force deletion, since the pod's controller
// replaces a Failed pod at once (the StatefulSet controller deletes it, and the API server
// removes a terminal pod without a grace period), and no force deletion may follow. Every
// write of a pod updates ph.
func (ph phases) failedMark(e Event) (p podObj, ok bool) {
	if !e.is("", "pods") || e.Verb == "delete" || e.Verb == "deletecollection" || !decode(e.ResponseObject, &p) || p.Metadata.UID == "" {
		return podObj{}, false
	}
	was := ph[p.Metadata.UID]
	ph[p.Metadata.UID] = p.Status.Phase
	if p.Status.Phase != "Failed" || was == "Failed" || p.Spec.NodeName == "" || e.User.Username == "system:node:"+p.Spec.NodeName {
		return podObj{}, false
	}
	return p, true
}

// NoEarlyRelease is check (b).
func NoEarlyRelease(evs []Event, releasers []string) []Violation {
	rel := map[string]bool{}
	for _, u := range releasers {
		rel[u] = true
	}
	confirmed := map[string]bool{} // node → a NodeFence with Fenced=True exists
	fenceNode := map[string]string{}
	tainted, ph := map[string]bool{}, phases{}
	var v []Violation
	for _, e := range evs {
		if e.is("fencing.palisade.dev", "nodefences") {
			trackFence(e, fenceNode, confirmed)
			continue
		}
		if node, what := release(e, tainted, rel, ph); node != "" && !confirmed[node] {
			v = append(v, Violation{"b NoEarlyRelease", fmt.Sprintf("%s at %s: node %s had no confirmed fence", what, e.at(), node)})
		}
	}
	return v
}

// trackFence follows NodeFences: their node, and whether each node's is confirmed.
func trackFence(e Event, fenceNode map[string]string, confirmed map[string]bool) {
	if e.Verb == "delete" {
		if n, ok := fenceNode[e.ObjectRef.Name]; ok {
			confirmed[n] = false
		}
		return
	}
	var f fenceObj
	if !decode(e.ResponseObject, &f) || f.Spec.NodeName == "" {
		return
	}
	fenceNode[e.ObjectRef.Name] = f.Spec.NodeName
	// A confirmation can be taken back (the node showed life after it): the latest word counts.
	if st, _ := f.fenced(); st != "" {
		confirmed[f.Spec.NodeName] = st == "True"
	}
	// A fence that ended with its node unfenced covers no later release: that needs a new one.
	if f.Status.Phase == "Recovered" {
		confirmed[f.Spec.NodeName] = false
	}
}

// NoHealthyFenced is check (c). mayFence holds the nodes a fault struck, each with when the
// first such fault struck it (the zero time when that is not known): a fence or a power-off of
// any other node, or of one of them before it was struck, is of a healthy node.
func NoHealthyFenced(evs []Event, mayFence map[string]time.Time, offs []PowerOff) []Violation {
	healthy := func(node string, at time.Time) (string, bool) {
		struck, ok := mayFence[node]
		switch {
		case !ok:
			return "which no fault struck", true
		case !struck.IsZero() && !at.IsZero() && at.Before(struck):
			return "before any fault struck it (the first at " + struck.Format("15:04:05.000") + ")", true
		}
		return "", false
	}
	var v []Violation
	for _, e := range evs {
		if !e.is("fencing.palisade.dev", "nodefences") || e.Verb != "create" {
			continue
		}
		var f fenceObj
		if !decode(e.ResponseObject, &f) {
			continue
		}
		if why, bad := healthy(f.Spec.NodeName, e.StageTimestamp); bad {
			v = append(v, Violation{"c NoHealthyFenced", fmt.Sprintf("NodeFence %s created at %s by %s for node %s, %s",
				e.ObjectRef.Name, e.at(), e.User.Username, f.Spec.NodeName, why)})
		}
	}
	for _, o := range offs {
		if why, bad := healthy(o.Node, o.At); bad {
			at := "" // a BMC that counts its power-off commands does not say when
			if !o.At.IsZero() {
				at = " at " + o.At.Format("15:04:05.000")
			}
			v = append(v, Violation{"c NoHealthyFenced", fmt.Sprintf("power-off sent to node %s%s, %s", o.Node, at, why)})
		}
	}
	return v
}

// Outage is a span in which the controllers could not reach the API server (the run's own
// faults: their API access cut, the API server cut from etcd and restarting). A fence cannot
// advance then, so (d) does not count it. A zero To lasts until the run's end.
type Outage struct{ From, To time.Time }

// FencesEnd is check (d): every fence ended, Released or Failed with a reason, within bound of
// its creation, not counting the outages. A fence still open at end is a violation either way:
// past its bound it did not end; within it, the run ended before it could be judged (a harness
// must wait for its fences, as the chaos runner does).
func FencesEnd(evs []Event, bound time.Duration, end time.Time, outages []Outage) []Violation {
	type fence struct {
		node    string
		created time.Time
		ended   time.Time
		how     string
	}
	fences := map[string]*fence{}
	var order []string
	for _, e := range evs {
		if !e.is("fencing.palisade.dev", "nodefences") || e.Verb == "delete" {
			continue
		}
		var f fenceObj
		if !decode(e.ResponseObject, &f) {
			continue
		}
		x, ok := fences[e.ObjectRef.Name]
		if !ok || e.Verb == "create" {
			x = &fence{node: f.Spec.NodeName, created: e.StageTimestamp}
			fences[e.ObjectRef.Name] = x
			order = append(order, e.ObjectRef.Name)
		}
		_, reason := f.fenced()
		if x.ended.IsZero() && (f.Status.Phase == "Released" || f.Status.Phase == "Failed" && reason != "") {
			x.ended, x.how = e.StageTimestamp, f.Status.Phase+" "+reason
		}
	}
	var v []Violation
	for _, name := range order {
		x := fences[name]
		to := x.ended
		if to.IsZero() {
			to = end
		}
		took := ActiveTime(x.created, to, outages)
		out := ""
		if d := to.Sub(x.created) - took; d > 0 {
			out = fmt.Sprintf(" (%s of it outside the controllers' outages)", took.Round(time.Second))
		}
		switch {
		case x.ended.IsZero() && took > bound:
			v = append(v, Violation{"d FencesEnd", fmt.Sprintf("NodeFence %s of node %s created at %s has not ended %s later%s, bound %s",
				name, x.node, x.created.Format("15:04:05.000"), end.Sub(x.created).Round(time.Second), out, bound)})
		case x.ended.IsZero():
			v = append(v, Violation{"d FencesEnd", fmt.Sprintf("NodeFence %s of node %s created at %s was still open when the run ended %s later%s, within its bound %s: the run did not wait to judge it",
				name, x.node, x.created.Format("15:04:05.000"), end.Sub(x.created).Round(time.Second), out, bound)})
		case took > bound:
			v = append(v, Violation{"d FencesEnd", fmt.Sprintf("NodeFence %s of node %s ended (%s) only %s after its creation%s, bound %s",
				name, x.node, x.how, x.ended.Sub(x.created).Round(time.Second), out, bound)})
		}
	}
	return v
}

// ActiveTime is the time from from to to outside the outages (an outage under way, with no To,
// lasts until to; overlapping outages count once).
func ActiveTime(from, to time.Time, outages []Outage) time.Duration {
	var in []Outage // the outages clipped to [from, to], by start
	for _, o := range outages {
		if o.To.IsZero() {
			o.To = to
		}
		if s, e := maxTime(from, o.From), minTime(to, o.To); e.After(s) {
			in = append(in, Outage{s, e})
		}
	}
	slices.SortFunc(in, func(a, b Outage) int { return a.From.Compare(b.From) })
	d := to.Sub(from)
	var covered time.Time // the end of the outages subtracted so far
	for _, o := range in {
		s := maxTime(o.From, covered)
		if o.To.After(s) {
			d -= o.To.Sub(s)
			covered = o.To
		}
	}
	return d
}
