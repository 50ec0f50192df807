package scale

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cpuProfileSeconds is how long the CPU profile samples, after the steady window (so that its
// own cost does not count in cpu_pct).
const cpuProfileSeconds = 10

// profile saves the controller's profiles at steady state as
// $PALISADE_SCALE_PROFILES/scale-{cpu,heap}-<n>.pprof when that directory is set, with pprof's
// top functions beside each (.top.txt), and logs the Go runtime's own memory figures, to read
// beside the RSS.
func (p *controller) profile(b *testing.B, bin string, n int) {
	dir := os.Getenv("PALISADE_SCALE_PROFILES")
	if dir == "" {
		dir = b.TempDir()
	}
	cpu := p.saveProfile(b, fmt.Sprintf("profile?seconds=%d", cpuProfileSeconds), filepath.Join(dir, fmt.Sprintf("scale-cpu-%d.pprof", n)))
	heap := p.saveProfile(b, "heap?gc=1", filepath.Join(dir, fmt.Sprintf("scale-heap-%d.pprof", n)))
	mib := func(metric string) float64 { return p.scrape(b, metric) / (1 << 20) }
	b.Logf("%d nodes: Go heap in use %.1f MiB (%d objects), stacks %.1f MiB, obtained from the OS %.1f MiB, %d goroutines",
		n, mib("go_memstats_heap_inuse_bytes"), int(p.scrape(b, "go_memstats_heap_objects")), mib("go_memstats_stack_inuse_bytes"),
		mib("go_memstats_sys_bytes"), int(p.scrape(b, "go_goroutines")))
	// The tops go to files: a benchmark's log is cut short after a few lines.
	b.Logf("%d nodes: CPU over %d s by function in %s, in-use heap by function in %s", n, cpuProfileSeconds,
		writeTop(b, bin, cpu, "cpu"), writeTop(b, bin, heap, "inuse_space"))
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

// writeTop writes pprof's top 25 functions of the profile by sample index ("cpu",
// "inuse_space") beside it, and returns that file's path.
func writeTop(b *testing.B, bin, path, index string) string {
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", "-sample_index="+index, bin, path).CombinedOutput()
	if err != nil {
		out = fmt.Appendf(out, "\ngo tool pprof: %v\n", err)
	}
	txt := strings.TrimSuffix(path, ".pprof") + ".top.txt"
	if err := os.WriteFile(txt, out, 0o644); err != nil {
		b.Fatalf("saving the top of %s: %v", path, err)
	}
	return txt
}
