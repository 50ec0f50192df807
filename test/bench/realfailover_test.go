package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/realscene"
	"palisade.dev/palisade/test/testbed/machine"
)

// kcmGracePeriod is kube-controller-manager's default node-monitor-grace-period.
const kcmGracePeriod = 50 * time.Second

// BenchmarkFailoverRealMachines is the failover on three real machines (real kubelets and
// containerd, the witness StatefulSet's db-0 writing to the witness store every 100 ms, on an
// RWO CSI volume): db-0's
// machine loses its power at a random point of its kubelet's renewal interval, and the time to
// the replacement's first write accepted by the store is taken — with Palisade (two controller
// replicas, a palisade-agent on every machine, a 20 s Lease timeout) and with vanilla
// Kubernetes plus the ideal operator (the out-of-service taint the moment the node turns
// NotReady, the default 50 s node-monitor grace period); Palisade once more with
// release.verifyWindow 0s. PALISADE_BENCH_REAL_RUNS runs each (default 3); the line reports the
// medians.
func BenchmarkFailoverRealMachines(b *testing.B) {
	runs := realRuns()
	var palisade, quick, vanilla []realRun
	for i := 1; i <= runs; i++ {
		// A sub-benchmark each, so that each scene is torn down before the next starts.
		var p, q, v realRun
		b.Run(fmt.Sprintf("palisade-%d", i), func(b *testing.B) { p = realFailover(b, palisadeDefault, defaults) })
		b.Run(fmt.Sprintf("palisade-no-verify-window-%d", i), func(b *testing.B) { q = realFailover(b, palisadeNoVerifyWindow, defaults) })
		b.Run(fmt.Sprintf("vanilla-%d", i), func(b *testing.B) { v = realFailover(b, vanillaOperator, defaults) })
		fmt.Printf("BENCH failover_real_machines_run run=%d palisade_first_write_s=%.1f palisade_released_s=%.1f palisade_verify_window_0_first_write_s=%.1f palisade_verify_window_0_released_s=%.1f vanilla_first_write_s=%.1f vanilla_released_s=%.1f\n",
			i, p.firstWrite.Seconds(), p.released.Seconds(), q.firstWrite.Seconds(), q.released.Seconds(), v.firstWrite.Seconds(), v.released.Seconds())
		palisade, quick, vanilla = append(palisade, p), append(quick, q), append(vanilla, v)
	}
	ps, qs, vs := medianOf(seconds(palisade, firstWrite)), medianOf(seconds(quick, firstWrite)), medianOf(seconds(vanilla, firstWrite))
	pr, qr, vr := medianOf(seconds(palisade, released)), medianOf(seconds(quick, released)), medianOf(seconds(vanilla, released))
	// The run's two parts: the release (the power loss to the stuck pod's deletion: Palisade's
	// part, or node lifecycle's and the operator's) and the rest (the deletion to the
	// replacement's first write: the StatefulSet, the scheduler, the attach and the new node's
	// kubelet, the same for all three).
	fmt.Printf("BENCH failover_real_machines_release palisade_released_s=%.1f vanilla_released_s=%.1f release_ratio=%.2f palisade_verify_window_0_released_s=%.1f release_ratio_verify_window_0=%.2f palisade_after_release_s=%.1f palisade_verify_window_0_after_release_s=%.1f vanilla_after_release_s=%.1f runs=%d\n",
		pr, vr, pr/vr, qr, qr/vr, medianOf(seconds(palisade, afterRelease)), medianOf(seconds(quick, afterRelease)), medianOf(seconds(vanilla, afterRelease)), len(palisade))
	fmt.Printf("BENCH failover_real_machines palisade_s=%.1f vanilla_s=%.1f ratio=%.2f palisade_verify_window_0_s=%.1f ratio_verify_window_0=%.2f runs=%d\n",
		ps, vs, ps/vs, qs, qs/vs, len(palisade))
}

// realRuns is $PALISADE_BENCH_REAL_RUNS, default 3.
func realRuns() int {
	if v, err := strconv.Atoi(os.Getenv("PALISADE_BENCH_REAL_RUNS")); err == nil && v > 0 {
		return v
	}
	return 3
}

// tuning is what a scene's cluster tunes for fast failovers: its kubelets and the Palisade
// policy's agent heartbeat interval.
type tuning struct {
	kubelet machine.KubeletTuning
	// heartbeat is the policy's detection.heartbeatInterval; zero keeps the default (1s).
	heartbeat time.Duration
}

var (
	// defaults tunes nothing.
	defaults tuning
	// fastFailover is a cluster tuned for fast failovers: kubelets that compute their node
	// status every second (posting it only when it changed) and renew their Lease every 2.5 s,
	// agents heartbeating every 500 ms.
	fastFailover = tuning{kubelet: machine.KubeletTuning{NodeStatusUpdateFrequency: time.Second, NodeLeaseDurationSeconds: 10},
		heartbeat: 500 * time.Millisecond}
)

// BenchmarkFailoverRealMachinesTuned is BenchmarkFailoverRealMachines in a cluster tuned for
// fast failovers (fastFailover), Palisade (its default verify window) against vanilla
// Kubernetes with the ideal operator, on the same tuned kubelets: what an operator who tunes
// gets. kube-controller-manager keeps its defaults (vanilla's 50 s node-monitor grace period:
// shortening it makes vanilla faster and the ideal operator's force deletion no safer).
func BenchmarkFailoverRealMachinesTuned(b *testing.B) {
	var palisade, vanilla []realRun
	for i := 1; i <= realRuns(); i++ {
		var p, v realRun
		b.Run(fmt.Sprintf("palisade-%d", i), func(b *testing.B) { p = realFailover(b, palisadeDefault, fastFailover) })
		b.Run(fmt.Sprintf("vanilla-%d", i), func(b *testing.B) { v = realFailover(b, vanillaOperator, fastFailover) })
		fmt.Printf("BENCH failover_real_machines_tuned_run run=%d palisade_first_write_s=%.1f palisade_released_s=%.1f vanilla_first_write_s=%.1f vanilla_released_s=%.1f\n",
			i, p.firstWrite.Seconds(), p.released.Seconds(), v.firstWrite.Seconds(), v.released.Seconds())
		palisade, vanilla = append(palisade, p), append(vanilla, v)
	}
	ps, vs := medianOf(seconds(palisade, firstWrite)), medianOf(seconds(vanilla, firstWrite))
	pr, vr := medianOf(seconds(palisade, released)), medianOf(seconds(vanilla, released))
	fmt.Printf("BENCH failover_real_machines_tuned palisade_s=%.1f vanilla_s=%.1f ratio=%.2f palisade_released_s=%.1f vanilla_released_s=%.1f release_ratio=%.2f palisade_after_release_s=%.1f vanilla_after_release_s=%.1f node_status_update_frequency=%s node_lease_duration_s=%d heartbeat_interval=%s runs=%d\n",
		ps, vs, ps/vs, pr, vr, pr/vr, medianOf(seconds(palisade, afterRelease)), medianOf(seconds(vanilla, afterRelease)),
		fastFailover.kubelet.NodeStatusUpdateFrequency, fastFailover.kubelet.NodeLeaseDurationSeconds, fastFailover.heartbeat, len(palisade))
}

// realRun is one real-machine failover, timed from the power loss.
type realRun struct {
	released   time.Duration // the stuck pod's deletion accepted by the API server
	firstWrite time.Duration // the replacement's first write accepted by the witness store
}

// seconds is one duration of each run, in seconds.
func seconds(rs []realRun, of func(realRun) time.Duration) []float64 {
	s := make([]float64, 0, len(rs))
	for _, r := range rs {
		s = append(s, of(r).Seconds())
	}
	return s
}

func firstWrite(r realRun) time.Duration   { return r.firstWrite }
func released(r realRun) time.Duration     { return r.released }
func afterRelease(r realRun) time.Duration { return r.firstWrite - r.released }

// The scenes of a real-machine failover.
type failoverKind int

const (
	palisadeDefault        failoverKind = iota // the policy's defaults: an 11 s verify window
	palisadeNoVerifyWindow                     // release.verifyWindow 0s: one check, no wait
	vanillaOperator                            // no Palisade; the ideal operator
)

// realFailover runs one scene and returns the times from the power loss under db-0 to the
// deletion of db-0 that the API server accepted (its audit log says when) and to the first
// write of its replacement that the store accepted.
func realFailover(b *testing.B, kind failoverKind, tu tuning) realRun {
	withPalisade := kind != vanillaOperator
	o := realscene.Options{Machines: 3, Agents: withPalisade, Volumes: true, Kubelet: tu.kubelet}
	if !withPalisade {
		o.NodeMonitorGracePeriod = kcmGracePeriod
	}
	s := realscene.Start(b, o)
	if withPalisade {
		s.CreatePolicy(b, 20*time.Second, func(p *v1alpha1.FencingPolicy) {
			if kind == palisadeNoVerifyWindow {
				p.Spec.Release.VerifyWindow = &metav1.Duration{}
			}
			if tu.heartbeat > 0 {
				p.Spec.Detection.HeartbeatInterval = &metav1.Duration{Duration: tu.heartbeat}
			}
		})
		s.StartControllers(b, 2)
	}
	s.DeployWitness(b, 1)
	first, _ := s.WaitWriter(b, realscene.PodName(0), "", time.Minute)
	time.Sleep(kubeletRenew + rand.N(kubeletRenew)) // the cut lands anywhere in a renewal interval
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cut := time.Now()
	if err := s.BMC(first).SetPower(false); err != nil {
		b.Fatal(err)
	}
	if !withPalisade {
		go idealOperator(ctx, s.Cluster.Client, first)
	}
	_, uid := s.WaitWriter(b, realscene.PodName(0), first, 5*time.Minute)
	r, _ := s.Store.FirstAppend(uid)
	run := realRun{firstWrite: r.Arrival.Sub(cut)}
	for _, ev := range s.Audit(b) {
		if ev.Verb == "delete" && ev.ObjectRef.Resource == "pods" && ev.ObjectRef.Subresource == "" &&
			ev.ObjectRef.Namespace == "default" && ev.ObjectRef.Name == realscene.PodName(0) && ev.StageTimestamp.After(cut) {
			run.released = ev.StageTimestamp.Sub(cut)
			break
		}
	}
	if run.released == 0 {
		b.Fatalf("the API server's audit log holds no deletion of %s after the power loss, yet its replacement wrote", realscene.PodName(0))
	}
	return run
}

func medianOf(s []float64) float64 {
	if len(s) == 0 {
		return 0
	}
	s = append([]float64(nil), s...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
