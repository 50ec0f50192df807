package scale

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// profileHeap saves the controller's heap profile at steady state (after a GC) as
// $PALISADE_SCALE_PROFILES/scale-heap-<n>.pprof when that directory is set, and logs where its
// memory goes: the Go runtime's own figures beside the RSS, and pprof's top in-use allocations.
func (p *controller) profileHeap(b *testing.B, bin string, n int) {
	dir := os.Getenv("PALISADE_SCALE_PROFILES")
	if dir == "" {
		dir = b.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("scale-heap-%d.pprof", n))
	resp, err := http.Get("http://" + p.pprof + "/debug/pprof/heap?gc=1")
	if err != nil {
		b.Fatalf("reading the controller's heap profile: %v", err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err == nil {
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		b.Fatalf("saving the heap profile: %v", err)
	}
	mib := func(metric string) float64 { return p.scrape(b, metric) / (1 << 20) }
	b.Logf("%d nodes: Go heap in use %.1f MiB (%d objects), stacks %.1f MiB, obtained from the OS %.1f MiB; profile %s",
		n, mib("go_memstats_heap_inuse_bytes"), int(p.scrape(b, "go_memstats_heap_objects")), mib("go_memstats_stack_inuse_bytes"), mib("go_memstats_sys_bytes"), path)
	top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=15", "-sample_index=inuse_space", bin, path).CombinedOutput()
	if err != nil {
		b.Logf("go tool pprof: %v", err)
	}
	b.Logf("in-use heap by function:\n%s", top)
}
