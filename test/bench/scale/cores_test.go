package scale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
)

// coresSample is where the machine's CPU time had gone at one moment: the busy and total
// jiffies of all its cores (/proc/stat), and the CPU ticks of every process this bench started
// (the test bed's control plane, the controller), by command name, and of the bench itself (the
// simulated nodes and agents, the polls).
type coresSample struct {
	cores       int // the machine's cores: one "cpuN" line each
	busy, total float64
	byProcess   map[string]float64
}

// sampleCores reads the machine's and the bench's processes' CPU time. Processes are this
// process and its descendants, so that nothing else on the machine is counted by name.
func sampleCores() (coresSample, error) {
	s := coresSample{byProcess: map[string]float64{}}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	line, rest, _ := strings.Cut(string(stat), "\n")
	for _, l := range strings.Split(rest, "\n") {
		if strings.HasPrefix(l, "cpu") {
			s.cores++
		}
	}
	fields := strings.Fields(line)[1:]
	// user nice system idle iowait irq softirq steal; guest time, after them, is in user already.
	for i, f := range fields[:min(8, len(fields))] {
		v, _ := strconv.ParseFloat(f, 64)
		s.total += v
		if i != 3 && i != 4 { // idle, iowait
			s.busy += v
		}
	}
	type proc struct {
		comm       string
		ppid       int
		utimeStime float64
	}
	procs := map[int]proc{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue // exited meanwhile
		}
		st := string(b)
		open, end := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if open < 0 || end < open {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(st[:open]))
		f := strings.Fields(st[end+2:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseFloat(f[11], 64)
		stt, _ := strconv.ParseFloat(f[12], 64)
		procs[pid] = proc{comm: st[open+1 : end], ppid: ppid, utimeStime: ut + stt}
	}
	self := os.Getpid()
	ours := func(pid int) bool {
		for n := 0; pid > 1 && n < 64; n++ {
			if pid == self {
				return true
			}
			pid = procs[pid].ppid
		}
		return false
	}
	for pid, p := range procs {
		if !ours(pid) {
			continue
		}
		name := p.comm
		if len(name) == 15 { // the kernel's comm is cut at 15 bytes: the command's own name
			if argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && len(argv) > 0 {
				arg0, _, _ := strings.Cut(string(argv), "\x00")
				name = filepath.Base(arg0)
			}
		}
		if pid == self {
			name = "the bench (simulated nodes and agents)"
		}
		s.byProcess[name] += p.utimeStime
	}
	return s, nil
}

// coresBetween says how busy the machine's cores were between s0 and s1, and how much of a
// core each of the bench's processes used, the largest first. Exited processes' time is lost.
func coresBetween(s0, s1 coresSample, secs float64) string {
	cores := float64(s1.cores)
	var out strings.Builder
	fmt.Fprintf(&out, "the machine's %.0f cores %.0f %% busy", cores, 100*(s1.busy-s0.busy)/(s1.total-s0.total))
	type use struct {
		name string
		pct  float64
	}
	var uses []use
	var ours float64
	for name, t := range s1.byProcess {
		if d := t - s0.byProcess[name]; d > 0 {
			pct := 100 * d / clockTicks / secs
			uses = append(uses, use{name, pct})
			ours += pct
		}
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].pct > uses[j].pct })
	fmt.Fprintf(&out, " (%.0f %% of a core, the bench's processes %.0f %%):", 100*cores*(s1.busy-s0.busy)/(s1.total-s0.total), ours)
	for _, u := range uses {
		if u.pct >= 0.5 {
			fmt.Fprintf(&out, "\n\t%s: %.0f %% of a core", u.name, u.pct)
		}
	}
	return out.String()
}

// machineLoad is where the machine's time had gone and what the API server had served, at one
// moment; either may be missing, with its error.
type machineLoad struct {
	cores            coresSample
	api              apiServerLoad
	coresErr, apiErr error
	// coresAt and apiAt are when each sample was taken: the API server's metrics take a while
	// to read on a busy machine, and a rate over a span counts from its own samples' moments.
	coresAt, apiAt time.Time
}

// takeLoad samples the machine's cores and the API server's request counters now.
func takeLoad(ctx context.Context, kube kubernetes.Interface) machineLoad {
	var l machineLoad
	l.cores, l.coresErr = sampleCores()
	l.coresAt = time.Now()
	l.api, l.apiErr = sampleAPIServer(ctx, kube)
	l.apiAt = time.Now()
	return l
}

// loadBetween logs, as "<when>: ...", how busy the cores were and what the API server served
// between l0 and l1, each over the span between its own two samples, or why it cannot say.
func loadBetween(b *testing.B, when string, l0, l1 machineLoad) {
	if err := errors.Join(l0.coresErr, l1.coresErr); err != nil {
		b.Logf("%s: the machine's cores: %v", when, err)
	} else {
		b.Logf("%s: %s", when, coresBetween(l0.cores, l1.cores, l1.coresAt.Sub(l0.coresAt).Seconds()))
	}
	if err := errors.Join(l0.apiErr, l1.apiErr); err != nil {
		b.Logf("%s: the API server's metrics: %v", when, err)
	} else {
		b.Logf("%s: %s", when, apiServerBetween(l0.api, l1.api, l1.apiAt.Sub(l0.apiAt).Seconds()))
	}
}

// apiServerLoad is what the API server served, by verb and resource, from its own metrics
// (apiserver_request_duration_seconds: every client's requests, watches left out): how many
// requests and their summed latency in seconds.
type apiServerLoad map[string]struct{ n, secs float64 }

func sampleAPIServer(ctx context.Context, kube kubernetes.Interface) (apiServerLoad, error) {
	raw, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := apiServerLoad{}
	for _, line := range strings.Split(string(raw), "\n") {
		const name = "apiserver_request_duration_seconds_"
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		kind, labels, ok := strings.Cut(rest, "{")
		if !ok || kind != "sum" && kind != "count" {
			continue
		}
		labels, value, _ := strings.Cut(labels, "} ")
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(v, `"`)
		}
		if l["verb"] == "WATCH" {
			continue
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		v, _ := strconv.ParseFloat(value, 64)
		e := out[key]
		if kind == "sum" {
			e.secs += v
		} else {
			e.n += v
		}
		out[key] = e
	}
	return out, nil
}

// apiServerBetween says how many requests a second the API server served between l0 and l1,
// and the most served by verb and resource with their mean latency.
func apiServerBetween(l0, l1 apiServerLoad, secs float64) string {
	type row struct {
		key     string
		n, secs float64
	}
	var rows []row
	var total float64
	for k, e := range l1 {
		if d := e.n - l0[k].n; d > 0 {
			rows = append(rows, row{k, d, e.secs - l0[k].secs})
			total += d
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].n > rows[j].n || rows[i].n == rows[j].n && rows[i].key < rows[j].key
	})
	var out strings.Builder
	fmt.Fprintf(&out, "the API server served %.0f requests (%.0f a second; every client's, watches left out), the most by verb and resource:", total, total/secs)
	for i, r := range rows {
		if i == 8 {
			break
		}
		fmt.Fprintf(&out, "\n\t%s: %.0f (%.0f a second), %.1f ms on average", r.key, r.n, r.n/secs, 1000*r.secs/r.n)
	}
	return out.String()
}

// queueTimes is the NodeFence controller's work queue so far: how many items waited in it and
// how long in all (workqueue_queue_duration_seconds), how many were worked on and how long
// (workqueue_work_duration_seconds).
type queueTimes struct{ waited, waitedSecs, worked, workedSecs float64 }

func (p *controller) queueTimes(b *testing.B) queueTimes {
	of := func(metric string) float64 { return p.scrape(b, metric, `name="nodefence"`) }
	return queueTimes{
		waited: of("workqueue_queue_duration_seconds_count"), waitedSecs: of("workqueue_queue_duration_seconds_sum"),
		worked: of("workqueue_work_duration_seconds_count"), workedSecs: of("workqueue_work_duration_seconds_sum"),
	}
}

// queueBetween says how long the items taken from the queue between q0 and q1 waited in it
// (verify passes among them: every reconcile of a fence is one item) and how long they were
// worked on, on average.
func queueBetween(q0, q1 queueTimes) string {
	waited, worked := q1.waited-q0.waited, q1.worked-q0.worked
	if waited <= 0 || worked <= 0 {
		return "no item taken"
	}
	return fmt.Sprintf("%.0f items taken, each waited %.1f ms in the queue on average (after its requeue delay) and was worked on %.1f ms",
		waited, 1000*(q1.waitedSecs-q0.waitedSecs)/waited, 1000*(q1.workedSecs-q0.workedSecs)/worked)
}
