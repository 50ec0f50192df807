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
	"time"
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
	mib := func(metric string) float64 { return p.scrape(b, metric, "") / (1 << 20) }
	b.Logf("%d nodes: Go heap in use %.1f MiB (%d objects), stacks %.1f MiB, obtained from the OS %.1f MiB, %d goroutines",
		n, mib("go_memstats_heap_inuse_bytes"), int(p.scrape(b, "go_memstats_heap_objects", "")), mib("go_memstats_stack_inuse_bytes"),
		mib("go_memstats_sys_bytes"), int(p.scrape(b, "go_goroutines", "")))
	// The tops go to files: a benchmark's log is cut short after a few lines.
	b.Logf("%d nodes: CPU over %d s by function in %s, in-use heap by function in %s", n, cpuProfileSeconds,
		writeTop(b, bin, cpu, "cpu"), writeTop(b, bin, heap, "inuse_space"))
}

// saveProfile reads /debug/pprof/<query> from the controller into path.
func (p *controller) saveProfile(b *testing.B, query, path string) string {
	if err := p.fetchProfile(query, path); err != nil {
		b.Fatal(err)
	}
	return path
}

// fetchProfile reads /debug/pprof/<query> from the controller into path.
func (p *controller) fetchProfile(query, path string) error {
	resp, err := http.Get("http://" + p.pprof + "/debug/pprof/" + query)
	if err != nil {
		return fmt.Errorf("reading the controller's profile %s: %w", query, err)
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
		return fmt.Errorf("saving the profile %s: %w", path, err)
	}
	return nil
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

// peakWatch follows the controller's memory from its start until stop is called: each time
// its peak RSS (VmHWM) has grown by peakStep it notes the moment, and, with
// PALISADE_SCALE_PEAK_PROFILE set (make bench-scale PEAK_PROFILE=1), each time its RSS is the
// highest yet it saves a heap profile (scale-heap-peak-<n>.pprof), so that the allocations
// behind the peak can be read. Off by default: the steady window should measure a controller
// that served nothing but its work (whether the profiles change its RSS is not settled: 69.3
// and 52.9 MiB of file-backed RSS in the two runs that had them on, 57.1–61.1 MiB without).
type peakWatch struct {
	rows []string
	prof string // the heap profile at the highest RSS, "" when none was read
	stop func()
}

// peakStep is how much the peak must grow for a row.
const peakStep = 8 << 10 // KiB

func (p *controller) watchPeak(b *testing.B, n int) *peakWatch {
	dir := os.Getenv("PALISADE_SCALE_PROFILES")
	if dir == "" {
		dir = b.TempDir()
	}
	w := &peakWatch{}
	done, stopped := make(chan struct{}), make(chan struct{})
	w.stop = func() { close(done); <-stopped }
	path := filepath.Join(dir, fmt.Sprintf("scale-heap-peak-%d.pprof", n))
	profiles := os.Getenv("PALISADE_SCALE_PEAK_PROFILE") != ""
	go func() {
		defer close(stopped)
		var noted, highest float64
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
			rss, _, peak, err := p.memoryKiB()
			if err != nil || rss == 0 {
				continue
			}
			if rss > highest && profiles {
				highest = rss
				if err := p.fetchProfile("heap", path); err == nil {
					w.prof = path
				}
			}
			if peak >= noted+peakStep {
				noted = peak
				heap, goroutines := p.tryScrape("go_memstats_heap_inuse_bytes"), p.tryScrape("go_goroutines")
				w.rows = append(w.rows, fmt.Sprintf("+%s: peak %.1f MiB, RSS %.1f MiB, Go heap in use %.1f MiB, %.0f goroutines",
					time.Since(p.started).Round(time.Second), peak/1024, rss/1024, heap/(1<<20), goroutines))
			}
		}
	}()
	return w
}

// log says how the peak grew and where the heap profile at the highest RSS is, with its top.
func (w *peakWatch) log(b *testing.B, bin string) {
	w.stop()
	b.Logf("the controller's peak RSS, from its start:\n\t%s", strings.Join(w.rows, "\n\t"))
	if w.prof != "" {
		b.Logf("in-use heap at the highest RSS by function in %s", writeTop(b, bin, w.prof, "inuse_space"))
	}
}

// tryScrape is scrape without failing the benchmark (from a goroutine): 0 when it cannot.
func (p *controller) tryScrape(metric string) float64 {
	series, _ := p.readSeries(metric)
	var sum float64
	for _, v := range series {
		sum += v
	}
	return sum
}
