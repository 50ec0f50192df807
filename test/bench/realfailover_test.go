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
	runs := 3
	if v, err := strconv.Atoi(os.Getenv("PALISADE_BENCH_REAL_RUNS")); err == nil && v > 0 {
		runs = v
	}
	var palisade, quick, vanilla []float64
	for i := 1; i <= runs; i++ {
		// A sub-benchmark each, so that each scene is torn down before the next starts.
		var p, q, v time.Duration
		b.Run(fmt.Sprintf("palisade-%d", i), func(b *testing.B) { p = realFailover(b, palisadeDefault) })
		b.Run(fmt.Sprintf("palisade-no-verify-window-%d", i), func(b *testing.B) { q = realFailover(b, palisadeNoVerifyWindow) })
		b.Run(fmt.Sprintf("vanilla-%d", i), func(b *testing.B) { v = realFailover(b, vanillaOperator) })
		fmt.Printf("BENCH failover_real_machines_run run=%d palisade_first_write_s=%.1f palisade_verify_window_0_first_write_s=%.1f vanilla_first_write_s=%.1f\n",
			i, p.Seconds(), q.Seconds(), v.Seconds())
		palisade, quick, vanilla = append(palisade, p.Seconds()), append(quick, q.Seconds()), append(vanilla, v.Seconds())
	}
	ps, qs, vs := medianOf(palisade), medianOf(quick), medianOf(vanilla)
	fmt.Printf("BENCH failover_real_machines palisade_s=%.1f vanilla_s=%.1f ratio=%.2f palisade_verify_window_0_s=%.1f ratio_verify_window_0=%.2f runs=%d\n",
		ps, vs, ps/vs, qs, qs/vs, len(palisade))
}

// The scenes of a real-machine failover.
type failoverKind int

const (
	palisadeDefault        failoverKind = iota // the policy's defaults: an 11 s verify window
	palisadeNoVerifyWindow                     // release.verifyWindow 0s: one check, no wait
	vanillaOperator                            // no Palisade; the ideal operator
)

// realFailover runs one scene and returns the time from the power loss under db-0 to the
// first write of its replacement that the store accepted.
func realFailover(b *testing.B, kind failoverKind) time.Duration {
	withPalisade := kind != vanillaOperator
	o := realscene.Options{Machines: 3, Agents: withPalisade, Volumes: true}
	if !withPalisade {
		o.NodeMonitorGracePeriod = kcmGracePeriod
	}
	s := realscene.Start(b, o)
	if withPalisade {
		s.CreatePolicy(b, 20*time.Second, func(p *v1alpha1.FencingPolicy) {
			if kind == palisadeNoVerifyWindow {
				p.Spec.Release.VerifyWindow = &metav1.Duration{}
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
	return r.Arrival.Sub(cut)
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
