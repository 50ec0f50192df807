package fencing

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// addNames keeps at most max entries, the last counting the rest across calls.
func TestAddNames(t *testing.T) {
	names := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("va%d", i))
		}
		return out
	}
	var list []string
	list = addNames(list, names(0, 2), 4)
	if diff := cmp.Diff([]string{"va0", "va1"}, list); diff != "" {
		t.Errorf("two names (-want +got):\n%s", diff)
	}
	list = addNames(list, names(2, 5), 4)
	if diff := cmp.Diff([]string{"va0", "va1", "va2", "and 2 more"}, list); diff != "" {
		t.Errorf("five names (-want +got):\n%s", diff)
	}
	list = addNames(list, names(5, 8), 4)
	if diff := cmp.Diff([]string{"va0", "va1", "va2", "and 5 more"}, list); diff != "" {
		t.Errorf("eight names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"va0", "va1", "va2", "va3"}, addNames(nil, names(0, 4), 4)); diff != "" {
		t.Errorf("four names of at most four (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"va0", "va1", "va2", "and 2 more"}, addNames(nil, names(0, 5), 4)); diff != "" {
		t.Errorf("five names of at most four (-want +got):\n%s", diff)
	}
	// A record longer than the bound (written under a larger one) is cut back, what is cut counted.
	if diff := cmp.Diff([]string{"va0", "va1", "va2", "and 3 more"}, addNames(append(names(0, 5), "and 1 more"), nil, 4)); diff != "" {
		t.Errorf("a record of six over a bound of four (-want +got):\n%s", diff)
	}
	// One name more into a full list with its summary: still at most the bound.
	if diff := cmp.Diff([]string{"va0", "va1", "va2", "and 3 more"}, addNames([]string{"va0", "va1", "va2", "and 2 more"}, names(5, 6), 4)); diff != "" {
		t.Errorf("one name into a full list (-want +got):\n%s", diff)
	}
	// The caller's list is not written through.
	held := append(make([]string, 0, 8), names(0, 2)...)
	_ = addNames(held[:1], names(5, 6), 4)
	if held[1] != "va1" {
		t.Errorf("addNames wrote into its argument's array: %v", held)
	}
}
