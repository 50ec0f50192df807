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

// cpuProfileSeconds is how long the CPU profile samples, after the steady window (so that its
// own cost does not count in cpu_pct).
const cpuProfileSeconds = 10

// profile saves the controller's profiles at steady state as
// $PALISADE_SCALE_PROFILES/scale-{cpu,heap}-<n>.pprof when that directory is set, and logs where
// its time and memory go: pprof's top functions, and the Go runtime's own memory figures beside
// the RSS.
func (p *controller) profile(b *testing.B, bin string, n int) {
	dir := os.Getenv("PALISADE_SCALE_PROFILES")
	if dir == "" {
		dir = b.TempDir()
	}
	cpu := p.saveProfile(b, fmt.Sprintf("profile?seconds=%d", cpuProfileSeconds), filepath.Join(dir, fmt.Sprintf("scale-cpu-%d.pprof", n)))
	b.Logf("%d nodes: CPU by function over %d s (profile %s):\n%s", n, cpuProfileSeconds, cpu, top(bin, cpu, "cpu"))
	heap := p.saveProfile(b, "heap?gc=1", filepath.Join(dir, fmt.Sprintf("scale-heap-%d.pprof", n)))
	mib := func(metric string) float64 { return p.scrape(b, metric) / (1 << 20) }
	b.Logf("%d nodes: Go heap in use %.1f MiB (%d objects), stacks %.1f MiB, obtained from the OS %.1f MiB; profile %s",
		n, mib("go_memstats_heap_inuse_bytes"), int(p.scrape(b, "go_memstats_heap_objects")), mib("go_memstats_stack_inuse_bytes"), mib("go_memstats_sys_bytes"), heap)
	b.Logf("in-use heap by function:\n%s", top(bin, heap, "inuse_space"))
}

// saveProfile reads /debug/pprof/<query> from the controller into path.
func (p *controller) saveProfile(b *testing.B, query, path string) string {
	resp, err := http.Get("http://" + p.pprof + "/debug/pprof/" + query)
	if err != nil {
		b.Fatalf("reading the controller's profile %s: %v", query, err)
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
		b.Fatalf("saving the profile %s: %v", path, err)
	}
	return path
}

// top is pprof's top 15 functions of the profile by sample index ("cpu", "inuse_space").
func top(bin, path, index string) string {
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=15", "-sample_index="+index, bin, path).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go tool pprof: %v\n%s", err, out)
	}
	return string(out)
}
