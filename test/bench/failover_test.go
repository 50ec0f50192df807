package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// The kubelet's defaults: Lease renewed every 10s. Palisade's policy uses its default lease
// timeout (20s); kube-controller-manager its default node-monitor-grace-period (50s).
const kubeletRenew = 10 * time.Second

type result struct {
	podDeleted, attachmentReleased, replacementRunning time.Duration
	confirmedBeforeRelease                             bool
}

// BenchmarkFailover cuts node 1's power under the database pod, once per run with Palisade (its
// controller and a node agent on every node) and once with vanilla Kubernetes and the ideal
// operator, and reports seconds from power loss to each milestone.
func BenchmarkFailover(b *testing.B) {
	runs := 3
	if v, err := strconv.Atoi(os.Getenv("PALISADE_BENCH_RUNS")); err == nil && v > 0 {
		runs = v
	}
	var palisade, vanilla []result
	for range b.N {
		for i := 1; i <= runs; i++ {
			p := failover(b, true)
			printRun("palisade", i, p)
			palisade = append(palisade, p)
			v := failover(b, false)
			printRun("vanilla", i, v)
			vanilla = append(vanilla, v)
		}
	}
	ps, vs := median(palisade), median(vanilla)
	confirmed := 0
	for _, r := range palisade {
		if r.confirmedBeforeRelease {
			confirmed++
		}
	}
	b.ReportMetric(ps, "palisade_s")
	b.ReportMetric(vs, "vanilla_s")
	fmt.Printf("BENCH failover palisade_s=%.1f vanilla_s=%.1f ratio=%.2f confirmed_before_release=%d/%d\n",
		ps, vs, ps/vs, confirmed, len(palisade))
}

func printRun(kind string, i int, r result) {
	fmt.Printf("BENCH failover_%s run=%d pod_deleted_s=%.1f attachment_released_s=%.1f replacement_running_s=%.1f confirmed_before_release=%t\n",
		kind, i, r.podDeleted.Seconds(), r.attachmentReleased.Seconds(), r.replacementRunning.Seconds(), r.confirmedBeforeRelease)
}

// failover runs one scene, node 1 fenced through its IPMI BMC: with Palisade's controller, or
// with the ideal operator instead.
func failover(b *testing.B, withPalisade bool) result {
	return failoverFencedBy(b, failoverMethods(b)["ipmi"](), withPalisade)
}

// idealOperator adds the out-of-service taint the moment the node's Ready condition is no
// longer True, as a human watching with no delay would.
func idealOperator(ctx context.Context, c client.Client, name string) {
	_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return false, nil
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return false, nil
			}
		}
		patch := client.MergeFrom(node.DeepCopy())
		now := metav1.Now()
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintOutOfService,
			Value: v1alpha1.TaintOutOfServiceValue, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now})
		return c.Patch(ctx, node, patch) == nil, nil
	})
}

func median(rs []result) float64 {
	s := make([]float64, 0, len(rs))
	for _, r := range rs {
		s = append(s, r.replacementRunning.Seconds())
	}
	return medianOf(s)
}
