package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/test/agentapi"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/containerd"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on Linux.
const clockTicks = 100

// BenchmarkAgentCost runs the agent as deployed (1 s interval, a healthy kubelet, heartbeats
// accepted by a Server on loopback, 3 peer agents that it probes and that probe it, with TLS)
// and measures its resident memory (VmRSS) and its CPU (utime+stime) over 10 s, after a 2 s
// warm-up.
func BenchmarkAgentCost(b *testing.B) {
	const window = 10 * time.Second
	e := newEnv(b, "127.0.0.1:0")
	k := newKubelet()
	defer k.srv.Close()
	p := e.startAgent(b, e.server.Addr(), k.srv.URL, time.Second)
	for _, peer := range []string{"peer-1", "peer-2", "peer-3"} {
		cert, key := e.agentCert(b, peer)
		e.startAgent(b, e.server.Addr(), k.srv.URL, time.Second, "--node-name", peer, "--cert", cert, "--key", key)
	}
	e.next(b, 10*time.Second)
	time.Sleep(3 * time.Second)
	pid := p.cmd.Process.Pid
	startTicks, startSched, start := cpuTicks(b, pid), schedNanos(b, pid), time.Now()
	for len(e.beats) > 0 {
		<-e.beats
	}
	time.Sleep(window)
	ticks, sched, elapsed := cpuTicks(b, pid)-startTicks, schedNanos(b, pid)-startSched, time.Since(start)
	heartbeats := 0
	for len(e.beats) > 0 {
		if hb := <-e.beats; hb.Node == testNode {
			heartbeats++
		}
	}
	if hb := e.server.Snapshot()[testNode]; len(hb.Peers) != 3 || !hb.Peers[0].Reachable || !hb.Peers[1].Reachable || !hb.Peers[2].Reachable {
		b.Fatalf("the measured agent's peer reports %+v, want 3 peers reachable", hb.Peers)
	} else if len(hb.ProbedBy) != 3 {
		b.Fatalf("the measured agent acknowledged the probes of %+v, want its 3 peers' (the cost measured includes verifying and answering them)", hb.ProbedBy)
	}
	rss := rssKiB(b, pid)
	mem := smapsRollup(b, pid)
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
	fmt.Printf("  (smaps_rollup: Rss %d KiB = Anonymous %d KiB + file-backed %d KiB; Private_Dirty %d KiB)\n",
		mem["Rss"], mem["Anonymous"], mem["Rss"]-mem["Anonymous"], mem["Private_Dirty"])
}

// smapsRollup reads /proc/<pid>/smaps_rollup: its sizes in KiB by field name (Rss, Anonymous,
// Private_Dirty, …). Its file-backed pages are Rss less Anonymous.
func smapsRollup(b *testing.B, pid int) map[string]int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(raw), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		if kib, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			out[name] = kib
		}
	}
	if _, ok := out["Rss"]; !ok {
		b.Fatalf("no Rss in /proc/%d/smaps_rollup", pid)
	}
	return out
}

// BenchmarkExecutorChildCost runs the agent as BenchmarkAgentCost does, with a real containerd
// as its runtime and its palisade-executor child started by a Terminate command (on a runtime
// without pods: Confirmed at once), which then answers every heartbeat's read-back. It measures
// both processes over 10 s, after a 2 s warm-up: the cost of an agent once it has needed the
// runtime.
func BenchmarkExecutorChildCost(b *testing.B) {
	const window = 10 * time.Second
	ctd := containerd.StartT(b)
	e := newEnv(b, "127.0.0.1:0")
	k := newKubelet()
	defer k.srv.Close()
	p := e.startAgent(b, e.server.Addr(), k.srv.URL, time.Second, "--cri-endpoint", ctd.Socket)
	e.server.SetCommand(testNode, agentwire.Command{ID: "c1", Action: agentwire.ActionTerminate})
	for deadline := time.Now().Add(30 * time.Second); ; {
		if st := e.next(b, 30*time.Second).Executor; st != nil && st.State == agentwire.ExecutorConfirmed {
			break
		} else if st != nil && st.State == agentwire.ExecutorFailed || time.Now().After(deadline) {
			b.Fatalf("executor status %+v, want Confirmed", st)
		}
	}
	pids := executorPIDs(b, p)
	if len(pids) != 1 {
		b.Fatalf("executor processes started: %v, want one", pids)
	}
	time.Sleep(2 * time.Second)
	procs := []int{p.cmd.Process.Pid, pids[0]}
	startTicks, start := []int64{cpuTicks(b, procs[0]), cpuTicks(b, procs[1])}, time.Now()
	for len(e.beats) > 0 {
		<-e.beats
	}
	time.Sleep(window)
	elapsed, beats := time.Since(start), 0
	for len(e.beats) > 0 {
		if hb := <-e.beats; hb.RunningContainers != nil {
			beats++
		}
	}
	var rss, cpu [2]float64
	for i, pid := range procs {
		rss[i] = float64(rssKiB(b, pid)) / 1024
		cpu[i] = 100 * float64(cpuTicks(b, pid)-startTicks[i]) / clockTicks / elapsed.Seconds()
	}
	mem := smapsRollup(b, pids[0])
	if code := p.stop(b); code != 0 {
		b.Errorf("exit status %d after SIGTERM", code)
	}
	b.ReportMetric(rss[0]+rss[1], "rss_MiB")
	b.ReportMetric(cpu[0]+cpu[1], "cpu_pct")
	fmt.Printf("BENCH agent+executor rss_mib=%.1f (agent %.1f + executor %.1f) cpu_pct=%.2f (agent %.2f + executor %.2f)\n",
		rss[0]+rss[1], rss[0], rss[1], cpu[0]+cpu[1], cpu[0], cpu[1])
	fmt.Printf("  (%d heartbeats with a read-back over %s; executor smaps_rollup: Rss %d KiB = Anonymous %d KiB + file-backed %d KiB)\n",
		beats, elapsed.Round(time.Millisecond), mem["Rss"], mem["Anonymous"], mem["Rss"]-mem["Anonymous"])
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

// podSpecsBenchPods is how many pods BenchmarkAgentPodSpecsCost binds to the agent's node: the
// kubelet's default maxPods.
const podSpecsBenchPods = 110

// BenchmarkAgentPodSpecsCost runs the agent as BenchmarkAgentCost does (its 3 peers too), with a
// real containerd and the real API server (--keep-pod-specs, the chart's default): it lists and watches the 110
// pods bound to its node (each with a sidecar, a stop signal, probes, env and resources, as
// real pods carry) and keeps them in memory and in its state directory. It measures the agent
// over 10 s of steady state, after its file holds every pod, and then while each pod is
// updated once (an annotation: 11 watch events per second), which rewrites the file each time.
func BenchmarkAgentPodSpecsCost(b *testing.B) {
	const window = 10 * time.Second
	c := testbed.StartT(b, testbed.Options{NoCSIAttacher: true, CRDDirs: []string{}, Controllers: []string{"serviceaccount-token-controller"}})
	ctx := context.Background()
	if _, err := c.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	api, err := agentapi.Args(ctx, c.Kube, c.Config.CAData, b.TempDir(), c.Config.Host, "")
	if err != nil {
		b.Fatal(err)
	}
	for i := range podSpecsBenchPods {
		pod := sidecarPod()
		pod.Name = fmt.Sprintf("web-%03d", i)
		pod.Labels = map[string]string{"app": "web", "pod-template-hash": "5d4f8c7b9"}
		for j := range pod.Spec.Containers {
			ctr := &pod.Spec.Containers[j]
			ctr.Env = []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "PORT", Value: "8080"}}
			ctr.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}
			ctr.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}}
		}
		if _, err := c.Kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	ctd := containerd.StartT(b)
	e := newEnv(b, "127.0.0.1:0")
	k := newKubelet()
	defer k.srv.Close()
	state := b.TempDir()
	p := e.startAgent(b, e.server.Addr(), k.srv.URL, time.Second, append([]string{"--cri-endpoint", ctd.Socket, "--state-dir", state}, api...)...)
	for _, peer := range []string{"peer-1", "peer-2", "peer-3"} {
		cert, key := e.agentCert(b, peer)
		e.startAgent(b, e.server.Addr(), k.srv.URL, time.Second, "--node-name", peer, "--cert", cert, "--key", key)
	}
	file := filepath.Join(state, specsFile)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		raw, err := os.ReadFile(file)
		var s struct{ Pods []corev1.Pod }
		return err == nil && json.Unmarshal(raw, &s) == nil && len(s.Pods) == podSpecsBenchPods, nil
	}); err != nil {
		b.Fatalf("the agent's %s never held the %d pods", specsFile, podSpecsBenchPods)
	}
	time.Sleep(2 * time.Second)
	pid := p.cmd.Process.Pid
	measure := func(during func()) (rssMiB, cpuPct float64) {
		startTicks, start := cpuTicks(b, pid), time.Now()
		during()
		time.Sleep(time.Until(start.Add(window)))
		return float64(rssKiB(b, pid)) / 1024, 100 * float64(cpuTicks(b, pid)-startTicks) / clockTicks / time.Since(start).Seconds()
	}
	steadyRSS, steadyCPU := measure(func() {})
	churnRSS, churnCPU := measure(func() {
		for i := range podSpecsBenchPods {
			patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"bench/seq":"%d"}}}`, i))
			if _, err := c.Kube.CoreV1().Pods("default").Patch(ctx, fmt.Sprintf("web-%03d", i), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				b.Error(err)
			}
			time.Sleep(window / podSpecsBenchPods)
		}
	})
	info, err := os.Stat(file)
	if err != nil {
		b.Fatal(err)
	}
	if code := p.stop(b); code != 0 {
		b.Errorf("exit status %d after SIGTERM", code)
	}
	b.ReportMetric(steadyRSS, "rss_MiB")
	b.ReportMetric(steadyCPU, "cpu_pct")
	fmt.Printf("BENCH agent_pod_specs pods=%d rss_mib=%.1f cpu_pct=%.2f churn_rss_mib=%.1f churn_cpu_pct=%.2f file_kib=%.1f\n",
		podSpecsBenchPods, steadyRSS, steadyCPU, churnRSS, churnCPU, float64(info.Size())/1024)
	fmt.Printf("  (steady: 10 s after the file held every pod; churn: each pod updated once over 10 s, the file rewritten at each)\n")
}
