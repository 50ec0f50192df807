package e2e

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/testbed"
)

// TestFencingTokensOnTheAPIServer: the counter on the real API server hands out tokens that
// only grow, with no token twice, while replicas draw at once; a counter deleted or set back
// starts over above the highest token on a NodeFence; a garbled one is an error that says
// what to do; and a NodeFence's recorded token cannot be changed.
func TestFencingTokensOnTheAPIServer(t *testing.T) {
	t.Parallel()
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true})
	ctx := context.Background()
	const ns = "palisade-system"
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: fencing.TokenLeaseName}
	replica := func() *fencing.Tokens { return &fencing.Tokens{Reader: c.Client, Writer: c.Client, Lease: key} }

	t.Run("replicas drawing at once", func(t *testing.T) {
		const replicas, each = 4, 15
		var mu sync.Mutex
		var all []int64
		var wg sync.WaitGroup
		for range replicas {
			wg.Go(func() {
				tokens, last := replica(), int64(0)
				for range each {
					tok, err := tokens.Next(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if tok <= last {
						t.Errorf("a replica drew %d after %d", tok, last)
					}
					last = tok
					mu.Lock()
					all = append(all, tok)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(all)
		if len(all) != replicas*each || len(slices.Compact(slices.Clone(all))) != len(all) || all[0] != 1 || all[len(all)-1] != replicas*each {
			t.Errorf("tokens %v: want 1..%d, each once", all, replicas*each)
		}
	})

	// A fence recorded with token 100 (say, before the counter was lost).
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "n1", Trigger: v1alpha1.TriggerManual,
		Methods: []v1alpha1.Method{{Name: "agent", Type: v1alpha1.MethodExecutor}}}}
	if err := c.Client.Create(ctx, nf); err != nil {
		t.Fatal(err)
	}
	nf.Status.Token = 100
	if err := c.Client.Status().Update(ctx, nf); err != nil {
		t.Fatal(err)
	}

	t.Run("counter deleted", func(t *testing.T) {
		if err := c.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fencing.TokenLeaseName}}); err != nil {
			t.Fatal(err)
		}
		if tok, err := replica().Next(ctx); err != nil || tok != 101 {
			t.Errorf("after the counter was deleted: %d, %v; want 101, above the NodeFence's 100", tok, err)
		}
	})
	t.Run("counter set back", func(t *testing.T) {
		setCounter(t, c, key, "7")
		if tok, err := replica().Next(ctx); err != nil || tok != 101 {
			t.Errorf("after the counter was set back to 7: %d, %v; want 101", tok, err)
		}
	})
	t.Run("counter garbled", func(t *testing.T) {
		setCounter(t, c, key, "eleven")
		_, err := replica().Next(ctx)
		if err == nil || !strings.Contains(err.Error(), `holds "eleven"`) || !strings.Contains(err.Error(), "delete the Lease") {
			t.Errorf("a garbled counter: %v; want an error that names it and says what to do", err)
		}
		setCounter(t, c, key, "200")
		if tok, err := replica().Next(ctx); err != nil || tok != 201 {
			t.Errorf("a counter ahead of every NodeFence: %d, %v; want 201", tok, err)
		}
	})
	t.Run("recorded token immutable", func(t *testing.T) {
		for _, tok := range []int64{101, 99, 0} {
			got := &v1alpha1.NodeFence{}
			if err := c.Client.Get(ctx, client.ObjectKey{Name: "n1"}, got); err != nil {
				t.Fatal(err)
			}
			got.Status.Token = tok
			err := c.Client.Status().Update(ctx, got)
			if err == nil || !strings.Contains(err.Error(), "status.token cannot be changed once recorded") {
				t.Errorf("changing the recorded token 100 to %d: %v; want a refusal", tok, err)
			}
		}
	})
}

func setCounter(t *testing.T, c *testbed.Cluster, key types.NamespacedName, value string) {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := c.Client.Get(context.Background(), key, l); err != nil {
		t.Fatal(err)
	}
	l.Annotations[fencing.AnnotationLastToken] = value
	if err := c.Client.Update(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}
