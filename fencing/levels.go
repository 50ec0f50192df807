package fencing

import (
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// levelSpan is the span [first, last] of the methods next to method i that share its level. A
// fence's methods list a level's methods together (levelOrder, when the fence is created); in a
// record written otherwise, a split level is confirmed only once all its methods are (levelNames),
// so the planner's walk over a span never releases early. A method without a level is a level
// of its own.
func levelSpan(methods []v1alpha1.Method, i int) (first, last int) {
	first, last = i, i
	if i < 0 || i >= len(methods) || methods[i].Level == "" {
		return first, last
	}
	for first > 0 && methods[first-1].Level == methods[i].Level {
		first--
	}
	for last+1 < len(methods) && methods[last+1].Level == methods[i].Level {
		last++
	}
	return first, last
}

// levelNames is the names of every method of method i's level, in order.
func levelNames(methods []v1alpha1.Method, i int) []string {
	if methods[i].Level == "" {
		return []string{methods[i].Name}
	}
	var names []string
	for _, m := range methods {
		if m.Level == methods[i].Level {
			names = append(names, m.Name)
		}
	}
	return names
}

// levelOrder is the chain with each level's methods moved up behind its first one, in their
// listed order: a level is taken where its first method is listed.
func levelOrder(chain []v1alpha1.Method) []v1alpha1.Method {
	out := make([]v1alpha1.Method, 0, len(chain))
	placed := map[int]bool{}
	for i, m := range chain {
		if placed[i] {
			continue
		}
		out, placed[i] = append(out, m), true
		if m.Level == "" {
			continue
		}
		for j := i + 1; j < len(chain); j++ {
			if chain[j].Level == m.Level {
				out, placed[j] = append(out, chain[j]), true
			}
		}
	}
	return out
}
