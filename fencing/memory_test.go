package fencing

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// The two things remembered of a fence are kept apart: forgetting its last write (the cache
// caught up, someone wrote after) keeps its unwritten passes, and taking the passes keeps the
// write; a fence made again under the name finds neither.
func TestFenceMemoryKeepsWritesAndPassesApart(t *testing.T) {
	var f fenceMemory
	f.wrote(fenceAt("a", "5"))
	f.addPasses(fenceAt("a", "5"), 3)
	if got := f.takePasses(fenceAt("a", "5")); got != 3 {
		t.Errorf("took %d passes, want 3", got)
	}
	if !f.behind(fenceAt("a", "4")) {
		t.Error("taking the passes forgot the last write")
	}
	f.addPasses(fenceAt("a", "5"), 2)
	if f.behind(fenceAt("a", "5")) { // the cache caught up: the write is forgotten
		t.Error("behind a cache that shows the last write")
	}
	if got := f.takePasses(fenceAt("a", "5")); got != 2 {
		t.Errorf("took %d passes after the cache caught up, want 2", got)
	}
	f.wrote(fenceAt("a", "6"))
	f.addPasses(fenceAt("a", "6"), 4)
	f.settle(fenceAt("a", "7"))
	if f.behind(fenceAt("a", "5")) {
		t.Error("behind after a later write by someone else")
	}
	if got := f.takePasses(fenceAt("a", "7")); got != 4 {
		t.Errorf("took %d passes after someone wrote, want 4", got)
	}
	f.wrote(fenceAt("a", "8"))
	f.addPasses(fenceAt("a", "8"), 1)
	if f.behind(fenceAt("b", "2")) {
		t.Error("a fence made again under the name is behind the old one's write")
	}
	if got := f.takePasses(fenceAt("a", "8")); got != 0 {
		t.Errorf("the old fence's passes (%d) outlived a new fence seen under its name", got)
	}
	if len(f.m) != 0 {
		t.Errorf("%d entries left with nothing in them", len(f.m))
	}
}

// fenceAt is the NodeFence "n1" made with UID uid-<uid>, at resourceVersion rv.
func fenceAt(uid, rv string) *v1alpha1.NodeFence {
	nf := &v1alpha1.NodeFence{}
	nf.Name, nf.UID, nf.ResourceVersion = "n1", types.UID("uid-"+uid), rv
	return nf
}
