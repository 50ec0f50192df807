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

// levelOrder is the chain as a fence takes it (v1alpha1.LevelOrder, the rule the CLI shows too).
func levelOrder(chain []v1alpha1.Method) []v1alpha1.Method { return v1alpha1.LevelOrder(chain) }
