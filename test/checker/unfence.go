package checker

import (
	"fmt"
	"strconv"
)

// nodeStatusObj is the part of a Node, as a write's response shows it, that CleanUnfence reads.
type nodeStatusObj struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		Taints []struct {
			Key string `json:"key"`
		} `json:"taints"`
	} `json:"spec"`
	Status struct {
		NodeInfo struct {
			BootID string `json:"bootID"`
		} `json:"nodeInfo"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

func (n nodeStatusObj) tainted() bool {
	for _, t := range n.Spec.Taints {
		if t.Key == outOfServiceTaint {
			return true
		}
	}
	return false
}

func (n nodeStatusObj) ready() bool {
	for _, c := range n.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// revision is the write's resourceVersion as a number (etcd's revision, which kube-apiserver
// hands out in the order it commits), 0 when it has none.
func (n nodeStatusObj) revision() int64 {
	r, _ := strconv.ParseInt(n.Metadata.ResourceVersion, 10, 64)
	return r
}

// CleanUnfence is check (f), invariant 5: a node is given back only when it is back and clean.
// An unfence is the out-of-service taint leaving a Node while the node's latest NodeFence is
// Released or Recovered: the fence's work was done, and only a recovery takes the taint off then
// (a fence disproved during its release takes its own taint off while Releasing, and that is no
// unfence). By then the node must have rebooted: the Node, as the removing write's response
// shows it, reports a boot ID other than every one it reported from that NodeFence's creation
// to its first confirmation (Fenced=True; a boot begun during the fence may have run what the
// fence stopped); and it must have come back: some write since the creation showed it Ready in
// a boot other than those. A run has no operator who confirms a node clean by hand
// (palisade.dev/unfence-request), so a reboot is the only proof there is.
//
// The audit log is written as requests complete, which is not always the order in which the API
// server committed them: Node writes are taken in the order of their resourceVersions, and an
// older one logged late is skipped. Node status writes (the nodes/status subresource, which the
// test bed's audit policy records) give each node's boot as it reports it; without them the boot
// at a fence's creation is only what the Node's last spec write showed.
func CleanUnfence(evs []Event) []Violation {
	_, v := JudgeUnfences(evs)
	return v
}

// JudgeUnfences is CleanUnfence, with how many unfences it judged: a run whose log held none
// tested nothing of invariant 5.
func JudgeUnfences(evs []Event) (judged int, v []Violation) {
	type fenceAt struct {
		name, phase string
		confirmed   bool
		fenced      map[string]bool // the boots reported from its creation to its first confirmation
		back        bool            // Ready shown since its creation in a boot not in fenced
	}
	node := map[string]nodeStatusObj{} // by name: the latest write's response, by resourceVersion
	latest := map[string]*fenceAt{}    // by node: its latest NodeFence not deleted
	fenceNode := map[string]string{}
	for _, e := range evs {
		switch {
		case e.is("fencing.palisade.dev", "nodefences"):
			if e.Verb == "delete" {
				if n, ok := fenceNode[e.ObjectRef.Name]; ok && latest[n] != nil && latest[n].name == e.ObjectRef.Name {
					delete(latest, n)
				}
				continue
			}
			var f fenceObj
			if !decode(e.ResponseObject, &f) || f.Spec.NodeName == "" {
				continue
			}
			n := f.Spec.NodeName
			fenceNode[e.ObjectRef.Name] = n
			if e.Verb == "create" {
				latest[n] = &fenceAt{name: e.ObjectRef.Name, fenced: map[string]bool{node[n].Status.NodeInfo.BootID: true}}
			}
			x := latest[n]
			if x == nil || x.name != e.ObjectRef.Name {
				continue
			}
			if f.Status.Phase != "" {
				x.phase = f.Status.Phase
			}
			if st, _ := f.fenced(); st == "True" {
				x.confirmed = true
			}
		case e.is("", "nodes") && (e.ObjectRef.Subresource == "" || e.ObjectRef.Subresource == "status"):
			name := e.ObjectRef.Name
			if e.Verb == "delete" {
				delete(node, name)
				continue
			}
			var now nodeStatusObj
			if !decode(e.ResponseObject, &now) {
				continue
			}
			was, known := node[name]
			if known && now.revision() <= was.revision() {
				continue // logged after a later write of the same Node
			}
			node[name] = now
			x := latest[name]
			if x == nil {
				continue
			}
			boot := now.Status.NodeInfo.BootID
			if !x.confirmed {
				x.fenced[boot] = true
			}
			if now.ready() && !x.fenced[boot] {
				x.back = true
			}
			if !known || !was.tainted() || now.tainted() || (x.phase != "Released" && x.phase != "Recovered") {
				continue
			}
			judged++
			say := func(why string, args ...any) {
				v = append(v, Violation{"f CleanUnfence", fmt.Sprintf("out-of-service taint removed from node %s at %s by %s (NodeFence %s %s), ",
					name, e.at(), e.User.Username, x.name, x.phase) + fmt.Sprintf(why, args...)})
			}
			switch {
			case boot == "" || x.fenced[""]:
				say("and no reboot can be shown: its boot ID unknown when fenced or now (now %q)", boot)
			case x.fenced[boot]:
				say("and the node had not rebooted: boot ID %s, one it reported while fenced", boot)
			case !x.back:
				say("and the node was not back: never Ready since the fence in a boot other than the fenced one(s)")
			}
		}
	}
	return judged, v
}
