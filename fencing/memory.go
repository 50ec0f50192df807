package fencing

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// fenceMemory is what the reconciler keeps of each NodeFence between its reconciles and does
// not write to the record: the resourceVersion of its own last write (ownwrites.go) and the
// passes of a verify window or a waiting release step taken since the record was last written (quiet.go). It is kept by fence
// name and belongs to one fence: a fence deleted and made again under its name starts from
// nothing. It is forgotten when the fence is deleted, and a new leader starts from nothing.
type fenceMemory struct {
	mu sync.Mutex
	m  map[string]remembered // fence name ->
}

type remembered struct {
	uid types.UID
	// rv is the resourceVersion of this controller's last write of the fence; empty once the
	// cache has shown it or the API server holds a later write.
	rv string
	// passes are the passes of the last step taken since the record was last written.
	passes int32
	// begun is 1 + the index of the step whose start this controller recorded last (0: none):
	// a step it finds started that it did not begin may have been taken by a controller that
	// died before recording so (began, begunHere).
	begun int
}

// of returns what is remembered of nf (nothing for another fence made under its name). The
// caller holds mu.
func (f *fenceMemory) of(nf *v1alpha1.NodeFence) remembered {
	if e, ok := f.m[nf.Name]; ok && e.uid == nf.UID {
		return e
	}
	return remembered{uid: nf.UID}
}

// keep stores e for the fence named name, or drops the entry when nothing is left in it. The
// caller holds mu.
func (f *fenceMemory) keep(name string, e remembered) {
	if e.rv == "" && e.passes == 0 && e.begun == 0 {
		delete(f.m, name)
		return
	}
	if f.m == nil {
		f.m = map[string]remembered{}
	}
	f.m[name] = e
}

// wrote remembers nf's resourceVersion as this controller's last write of it.
func (f *fenceMemory) wrote(nf *v1alpha1.NodeFence) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.of(nf)
	e.rv = nf.ResourceVersion
	f.keep(nf.Name, e)
}

// behind says whether cached is not this controller's last write of the fence (the cache is
// behind it, or someone wrote after it); it forgets a write the cache has caught up with, and
// all of another fence once made under the name.
func (f *fenceMemory) behind(cached *v1alpha1.NodeFence) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.m[cached.Name]
	if !ok || e.rv == "" {
		return false
	}
	if e.uid != cached.UID {
		delete(f.m, cached.Name)
		return false
	}
	if e.rv == cached.ResourceVersion {
		e.rv = ""
		f.keep(cached.Name, e)
		return false
	}
	return true
}

// settle forgets the fence's last write once the API server holds a later one.
func (f *fenceMemory) settle(fresh *v1alpha1.NodeFence) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.m[fresh.Name]; ok && e.rv != "" && e.rv != fresh.ResourceVersion {
		e.rv = ""
		f.keep(fresh.Name, e)
	}
}

// addPasses counts n more unwritten passes of nf and returns how many there are now.
func (f *fenceMemory) addPasses(nf *v1alpha1.NodeFence, n int32) int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.of(nf)
	if n <= 0 {
		return e.passes
	}
	e.passes += n
	f.keep(nf.Name, e)
	return e.passes
}

// takePasses returns the unwritten passes of nf and forgets them.
func (f *fenceMemory) takePasses(nf *v1alpha1.NodeFence) int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.of(nf)
	n := e.passes
	e.passes = 0
	f.keep(nf.Name, e)
	return n
}

// began remembers that this controller recorded the start of nf's last step.
func (f *fenceMemory) began(nf *v1alpha1.NodeFence) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.of(nf)
	e.begun = len(nf.Status.Steps)
	f.keep(nf.Name, e)
}

// begunHere says whether this controller recorded the start of nf's last step.
func (f *fenceMemory) begunHere(nf *v1alpha1.NodeFence) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.of(nf).begun == len(nf.Status.Steps)
}

// forget drops all that is remembered of the fence named name (it was deleted).
func (f *fenceMemory) forget(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, name)
}
