package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/testbed"
)

// BenchmarkFencingTokens measures what a fencing token adds before a fence's first step, on the
// real API server, wired as the controller wires it (the Lease read from the API server, the
// NodeFences listed from a cache), with 200 NodeFences in the cluster: the time of one draw
// (median and worst of 50 in a row) and the time 40 fences drawing at once (a rack lost; the
// controller's workers) take until the last has its token.
func BenchmarkFencingTokens(b *testing.B) {
	c := testbed.StartT(b, testbed.Options{NoCSIAttacher: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "palisade-system"
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	for i := range 200 {
		nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i)}, Spec: v1alpha1.NodeFenceSpec{
			NodeName: fmt.Sprintf("node-%d", i), Trigger: v1alpha1.TriggerManual, Methods: []v1alpha1.Method{{Name: "agent", Type: v1alpha1.MethodExecutor}}}}
		if err := c.Client.Create(ctx, nf); err != nil {
			b.Fatal(err)
		}
	}
	informers, err := cache.New(c.Config, cache.Options{Scheme: c.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		b.Fatal("cache not synced")
	}
	cached, err := client.New(c.Config, client.Options{Scheme: c.Scheme, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		b.Fatal(err)
	}
	if err := cached.List(ctx, &v1alpha1.NodeFenceList{}); err != nil { // starts the NodeFence informer
		b.Fatal(err)
	}
	tokens := &fencing.Tokens{Reader: c.Client, Writer: cached, Lease: types.NamespacedName{Namespace: ns, Name: fencing.TokenLeaseName}}

	var single []float64
	for range 50 {
		start := time.Now()
		if _, err := tokens.Next(ctx); err != nil {
			b.Fatal(err)
		}
		single = append(single, time.Since(start).Seconds()*1000)
	}
	worst := 0.0
	for _, ms := range single {
		worst = max(worst, ms)
	}

	var wg sync.WaitGroup
	start := time.Now()
	for range 40 {
		wg.Go(func() {
			if _, err := tokens.Next(ctx); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	rack := time.Since(start).Seconds()
	b.ReportMetric(medianOf(single), "draw_ms")
	fmt.Printf("BENCH tokens nodefences=200 draw_ms=%.2f draw_max_ms=%.2f rack40_s=%.3f\n", medianOf(single), worst, rack)
}
