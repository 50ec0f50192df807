package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// BenchmarkDetection measures the time from a node's power loss to Palisade's verdict: the
// NodeFence the controller creates for it. Four simulated nodes each run a real palisade-agent
// (default 1 s heartbeat, peer probing on), their kubelets renew Leases every 10 s, and the
// policy is a dry run, so that a run changes nothing but the NodeFence. Every run cuts one
// node's power (round robin) at a random point of its heartbeat, then restores it and waits for
// the node to be healthy again before the next. p50 and p99 are nearest-rank over all runs.
func BenchmarkDetection(b *testing.B) {
	runs := 20
	if v, err := strconv.Atoi(os.Getenv("PALISADE_DETECTION_RUNS")); err == nil && v > 0 {
		runs = v
	}
	ctx := context.Background()
	env, err := scenario.Start(ctx, scenario.Options{Nodes: 4, Agents: true, LeaseRenewInterval: kubeletRenew,
		Policy: func(p *v1alpha1.FencingPolicy) { p.Spec.DryRun = true }})
	if err != nil {
		b.Fatalf("starting scene: %v", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			b.Errorf("stopping scene: %v", err)
		}
	}()
	if err := env.StartController(ctx, nil); err != nil {
		b.Fatal(err)
	}
	// Agents heartbeat, get their peers and probe them: measure from a scene the agents cover.
	if _, err := env.WaitAgentsHeard(ctx, 3, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	var lat []float64
	for range b.N {
		for i := 0; i < runs; i++ {
			n := env.Node(1 + i%len(env.Nodes))
			time.Sleep(time.Duration(rand.Int64N(int64(2 * time.Second))))
			d, reason := detectOnce(b, env, n)
			lat = append(lat, d.Seconds())
			fmt.Printf("BENCH detection_run run=%d node=%s verdict_s=%.2f reason=%q\n", i+1, n.Name(), d.Seconds(), reason)
		}
	}
	sort.Float64s(lat)
	p50, p99 := nearestRank(lat, 0.50), nearestRank(lat, 0.99)
	b.ReportMetric(p50, "p50_s")
	b.ReportMetric(p99, "p99_s")
	fmt.Printf("BENCH detection p50_s=%.2f p99_s=%.2f runs=%d\n", p50, p99, len(lat))
}

// detectOnce cuts n's power, waits for its NodeFence, then brings n back healthy and removes
// the NodeFence. It returns the time to the verdict and the verdict's reason.
func detectOnce(b *testing.B, env *scenario.Env, n *scenario.Node) (time.Duration, string) {
	ctx := context.Background()
	c := env.Cluster.Client
	start := time.Now()
	if err := n.BMC.SetPower(false); err != nil {
		b.Fatal(err)
	}
	nf := &v1alpha1.NodeFence{}
	var took time.Duration
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: n.Name()}, nf); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		took = time.Since(start)
		return true, nil
	})
	if err != nil {
		b.Fatalf("no NodeFence for %s within a minute of its power loss: %v", n.Name(), err)
	}
	if !strings.HasPrefix(nf.Spec.Reason, "Dead") {
		b.Fatalf("%s fenced with reason %q, want a Dead verdict", n.Name(), nf.Spec.Reason)
	}
	if err := n.BMC.SetPower(true); err != nil {
		b.Fatal(err)
	}
	// Healthy again: the kubelet renewed its Lease after booting, and the agent heartbeats
	// (a few intervals, so that its peers reach it again).
	time.Sleep(4 * time.Second)
	if err := c.Delete(ctx, nf); err != nil {
		b.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: n.Name()}, &v1alpha1.NodeFence{})
		return err != nil && client.IgnoreNotFound(err) == nil, nil
	})
	if err != nil {
		b.Fatalf("NodeFence of %s not gone: %v", n.Name(), err)
	}
	return took, nf.Spec.Reason
}

// nearestRank is the p-quantile of sorted xs by the nearest-rank method.
func nearestRank(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[max(i, 0)]
}
