package checker

import (
	"fmt"
	"sort"
	"time"

	"palisade.dev/palisade/test/witness"
)

// writer is one session's trail in the history.
type writer struct {
	session     string
	id          witness.Identity
	first, last time.Time
	writes      int
}

func (w writer) String() string {
	return fmt.Sprintf("session %s (pod UID %s on %s, boot %s: %d writes %s…%s)", w.session, w.id.PodUID, w.id.Node,
		w.id.BootID, w.writes, w.first.Format("15:04:05.000"), w.last.Format("15:04:05.000"))
}

// writers groups the history by session, per pod name, each pod's writers by first write.
func writers(h []witness.Record) map[string][]writer {
	by := map[string]*writer{}
	var order []string
	for _, r := range h {
		w, ok := by[r.Session]
		if !ok {
			w = &writer{session: r.Session, id: r.Identity, first: r.Arrival}
			by[r.Session] = w
			order = append(order, r.Session)
		}
		if r.Arrival.Before(w.first) {
			w.first = r.Arrival
		}
		if r.Arrival.After(w.last) {
			w.last = r.Arrival
		}
		w.writes++
	}
	pods := map[string][]writer{}
	for _, s := range order {
		w := by[s]
		pods[w.id.Pod] = append(pods[w.id.Pod], *w)
	}
	for _, ws := range pods {
		sort.SliceStable(ws, func(i, j int) bool { return ws[i].first.Before(ws[j].first) })
	}
	return pods
}

// OneCopy is check (a): no two writers of one pod name alive at overlapping times.
func OneCopy(h []witness.Record, tolerance time.Duration) []Violation {
	var v []Violation
	pods := writers(h)
	names := make([]string, 0, len(pods))
	for p := range pods {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		ws := pods[p]
		for i := range ws {
			for j := i + 1; j < len(ws); j++ {
				a, b := ws[i], ws[j]
				overlap := minTime(a.last, b.last).Sub(b.first) // b.first >= a.first
				if overlap > tolerance {
					v = append(v, Violation{"a OneCopy", fmt.Sprintf("two copies of pod %s accepted at once for %s: %s and %s",
						p, overlap, a, b)})
				}
			}
		}
	}
	return v
}

// NoWriteAfterRemoval is check (a) from the other side: a pod's API object removed while the
// pod may still run (force-deleted, marked Failed, or deleted once marked Failed, by anyone but its node's
// kubelet) must have no copy left writing. A write of that pod UID accepted more than slack
// after the removal is a copy that outlived its release, whether or not its replacement wrote
// beside it yet: OneCopy sees only the overlaps, and a copy that dies at the heal before its
// replacement writes leaves none. Writes in flight at the removal arrive within slack.
func NoWriteAfterRemoval(h []witness.Record, evs []Event, slack time.Duration) []Violation {
	type removal struct {
		at   time.Time
		what string
	}
	removed := map[string]removal{} // pod UID → its first removal
	ph := phases{}
	for _, e := range evs {
		how := "marked Failed"
		p, ok := ph.failedMark(e)
		if !ok {
			var force bool
			if p, force, ok = podDeletion(e); !ok || (!force && p.Status.Phase != "Failed") {
				continue // a graceful deletion: the kubelet stops the pod before the object goes
			}
			how = "removed"
		}
		if _, seen := removed[p.Metadata.UID]; !seen && p.Metadata.UID != "" {
			removed[p.Metadata.UID] = removal{e.StageTimestamp, fmt.Sprintf("pod %s/%s (UID %s) on %s %s by %s at %s",
				e.ObjectRef.Namespace, e.ObjectRef.Name, p.Metadata.UID, p.Spec.NodeName, how, e.User.Username, e.at())}
		}
	}
	type late struct {
		n           int
		first, last time.Time
	}
	after := map[string]*late{}
	var order []string
	for _, r := range h {
		rm, ok := removed[r.PodUID]
		if !ok || r.Kind != witness.KindAppend || !r.Arrival.After(rm.at.Add(slack)) {
			continue
		}
		l := after[r.PodUID]
		if l == nil {
			l = &late{first: r.Arrival}
			after[r.PodUID] = l
			order = append(order, r.PodUID)
		}
		l.n++
		l.last = maxTime(l.last, r.Arrival)
	}
	var v []Violation
	for _, uid := range order {
		l, rm := after[uid], removed[uid]
		v = append(v, Violation{"a NoWriteAfterRemoval", fmt.Sprintf("%s, but that copy wrote %d times after it, %s…%s: it was released while it ran",
			rm.what, l.n, l.first.Format("15:04:05.000"), l.last.Format("15:04:05.000"))})
	}
	return v
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ReplicasReturn is check (e): each pod wrote after healed.
func ReplicasReturn(h []witness.Record, pods []string, healed time.Time) []Violation {
	last := map[string]time.Time{}
	for _, r := range h {
		if r.Kind == witness.KindAppend && r.Arrival.After(last[r.Pod]) {
			last[r.Pod] = r.Arrival
		}
	}
	var v []Violation
	for _, p := range pods {
		if !last[p].After(healed) {
			v = append(v, Violation{"e ReplicasReturn", fmt.Sprintf("pod %s did not write after the heal at %s (last write %s)",
				p, healed.Format(time.RFC3339Nano), fmtTime(last[p]))})
		}
	}
	return v
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format(time.RFC3339Nano)
}

// AuditComplete checks that the audit log holds what the run saw elsewhere: the creation of
// every pod whose copy wrote to the store (by UID) and of every NodeFence the run listed at its
// end (by name). A log missing them (an audit backend that dropped events, a policy that no
// longer records the resource) would let the checks read from it pass on nothing.
func AuditComplete(h []witness.Record, evs []Event, fences []string) []Violation {
	pods, made := map[string]bool{}, map[string]bool{}
	for _, e := range evs {
		if e.Verb != "create" || e.ObjectRef.Subresource != "" {
			continue
		}
		var p podObj
		switch {
		case e.is("", "pods") && decode(e.ResponseObject, &p):
			pods[p.Metadata.UID] = true
		case e.is("fencing.palisade.dev", "nodefences"):
			made[e.ObjectRef.Name] = true
		}
	}
	var v []Violation
	seen := map[string]bool{}
	for _, r := range h {
		if uid := r.PodUID; uid != "" && !pods[uid] && !seen[uid] {
			seen[uid] = true
			v = append(v, Violation{"audit AuditComplete", fmt.Sprintf("pod %s (UID %s, node %s) wrote to the store, but the audit log holds no creation of it", r.Pod, uid, r.Node)})
		}
	}
	for _, f := range fences {
		if !made[f] {
			v = append(v, Violation{"audit AuditComplete", fmt.Sprintf("NodeFence %s exists, but the audit log holds no creation of it", f)})
		}
	}
	return v
}
