package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on Linux.
const clockTicks = 100

// BenchmarkAgentCost runs the agent as deployed (1 s interval, a healthy kubelet, heartbeats
// accepted by a Server on loopback) and measures its resident memory (VmRSS) and its CPU
// (utime+stime) over 10 s, after a 2 s warm-up.
func BenchmarkAgentCost(b *testing.B) {
	const window = 10 * time.Second
	e := newEnv(b, "127.0.0.1:0")
	k := newKubelet()
	defer k.srv.Close()
	p := e.startAgent(b, e.server.Addr(), k.srv.URL, time.Second)
	e.next(b, 10*time.Second)
	time.Sleep(2 * time.Second)
	pid := p.cmd.Process.Pid
	startTicks, startSched, start := cpuTicks(b, pid), schedNanos(b, pid), time.Now()
	for len(e.beats) > 0 {
		<-e.beats
	}
	time.Sleep(window)
	ticks, sched, elapsed, heartbeats := cpuTicks(b, pid)-startTicks, schedNanos(b, pid)-startSched, time.Since(start), len(e.beats)
	rss := rssKiB(b, pid)
	if code := p.stop(b); code != 0 {
		b.Errorf("exit status %d after SIGTERM", code)
	}
	cpuPct := 100 * float64(ticks) / clockTicks / elapsed.Seconds()
	schedPct := 100 * float64(sched) / float64(elapsed.Nanoseconds())
	rssMiB := float64(rss) / 1024
	b.ReportMetric(rssMiB, "rss_MiB")
	b.ReportMetric(cpuPct, "cpu_pct")
	b.ReportMetric(schedPct, "sched_cpu_pct")
	fmt.Printf("BENCH agent rss_mib=%.1f cpu_pct=%.2f\n", rssMiB, cpuPct)
	fmt.Printf("  (%d heartbeats over %s; utime+stime %d ticks of 10 ms, so cpu_pct resolves to %.2f; "+
		"the threads' schedstat run time says %.3f%%)\n", heartbeats, elapsed.Round(time.Millisecond), ticks, 100/clockTicks/elapsed.Seconds(), schedPct)
}

// cpuTicks is utime+stime of pid, fields 14 and 15 of /proc/<pid>/stat.
func cpuTicks(b *testing.B, pid int) int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) is in parentheses and may hold spaces; fields 3… follow it.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, err1 := strconv.ParseInt(fields[14-3], 10, 64)
	stime, err2 := strconv.ParseInt(fields[15-3], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("parsing /proc/%d/stat: %v %v", pid, err1, err2)
	}
	return utime + stime
}

// schedNanos is the nanoseconds pid's live threads have run, from /proc/<pid>/task/*/schedstat:
// a finer cross-check of the tick-grained utime+stime.
func schedNanos(b *testing.B, pid int) int64 {
	b.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		b.Fatalf("listing the threads of %d: %v", pid, err)
	}
	var total int64
	for _, f := range tasks {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		if fields := strings.Fields(string(raw)); len(fields) > 0 {
			n, _ := strconv.ParseInt(fields[0], 10, 64)
			total += n
		}
	}
	return total
}

// rssKiB is VmRSS of pid, from /proc/<pid>/status.
func rssKiB(b *testing.B, pid int) int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("parsing %q: %v", line, err)
			}
			return kib
		}
	}
	b.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
