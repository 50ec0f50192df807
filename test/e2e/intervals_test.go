package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed"
)

// TestAgentIntervalsFollowTheAPI: the heartbeat interval the controller asks of each node's
// agent follows the API server through the cache's events, at once and not after the memo's
// TTL: a node that arrives after its agent was answered, a policy's new interval, a node
// relabelled into another policy, a new policy that wins by name, a deleted policy, a deleted
// node. Each answer is first read (and so remembered) before the change, so only the events
// can make it change within the test's bound.
func TestAgentIntervalsFollowTheAPI(t *testing.T) {
	t.Parallel()
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	informers, err := cache.New(c.Config, cache.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := client.New(c.Config, client.Options{Scheme: c.Scheme, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		t.Fatal(err)
	}
	intervalOf, err := fencing.HeartbeatIntervals(ctx, reader, informers)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := informers.Start(ctx); err != nil {
			t.Errorf("cache: %v", err)
		}
	}()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}

	policy := func(name, label string, every time.Duration) *v1alpha1.FencingPolicy {
		p := &v1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.FencingPolicySpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}},
			Methods:      scenario.NewPolicy(0).Spec.Methods,
		}}
		if every > 0 {
			p.Spec.Detection.HeartbeatInterval = &metav1.Duration{Duration: every}
		}
		return p
	}
	db := policy("b-db", "db", 3*time.Second)
	web := policy("c-web", "web", 0)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"db": "true"}}}
	for _, o := range []client.Object{db, web} {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The policies in the cache, n1's agent heartbeats before its node exists (or before the
	// cache holds it): no policy, 0 remembered. Only the node's arrival can change that now.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var l v1alpha1.FencingPolicyList
		if err := reader.List(ctx, &l); err == nil && len(l.Items) == 2 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the cache holds %d policies after 5s, want 2 (%v)", len(l.Items), err)
		}
	}
	if got := intervalOf("n1"); got != 0 {
		t.Fatalf("the interval asked of an unknown node's agent is %v, want 0", got)
	}
	if err := c.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	// settle waits for the answer to become want, within a bound far below the memo's TTL.
	settle := func(step string, want time.Duration) {
		t.Helper()
		const bound = 5 * time.Second
		deadline := time.Now().Add(bound)
		for {
			got := intervalOf("n1")
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the interval asked of n1's agent is %v after %s, want %v", step, got, bound, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if fencing.IntervalMemoTTL < 10*time.Second {
		t.Fatalf("IntervalMemoTTL is %v: too short for this test to tell the events from the TTL", fencing.IntervalMemoTTL)
	}
	settle("n1 created, under policy b-db", 3*time.Second)

	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
		t.Fatal(err)
	}
	db.Spec.Detection.HeartbeatInterval.Duration = 2 * time.Second
	if err := c.Client.Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	settle("b-db's interval changed to 2s", 2*time.Second)

	patch := client.MergeFrom(node.DeepCopy())
	node.Labels = map[string]string{"web": "true"}
	if err := c.Client.Patch(ctx, node, patch); err != nil {
		t.Fatal(err)
	}
	settle("n1 relabelled into c-web (no interval: the default)", fencing.DefaultHeartbeatInterval)

	first := policy("a-web-fast", "web", 500*time.Millisecond)
	if err := c.Client.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	settle("a-web-fast created (first by name)", 500*time.Millisecond)

	if err := c.Client.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	settle("a-web-fast deleted", fencing.DefaultHeartbeatInterval)

	if err := c.Client.Delete(ctx, web); err != nil {
		t.Fatal(err)
	}
	settle("c-web deleted (no policy: the agent keeps its own)", 0)

	patch = client.MergeFrom(node.DeepCopy())
	node.Labels = map[string]string{"db": "true"}
	if err := c.Client.Patch(ctx, node, patch); err != nil {
		t.Fatal(err)
	}
	settle("n1 relabelled back into b-db", 2*time.Second)

	if err := c.Client.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	settle("n1 deleted", 0)
}
