package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/testbed"
)

// barrier holds every list of one node's pods (the read that precedes a fence's creation)
// until want of them are in flight together, or until a timeout; then it lets everything
// through. It records how many were in flight at most while it held, and whether it tripped.
type barrier struct {
	want    int
	hold    time.Duration // how long it keeps holding once tripped, for lists beyond want
	timeout time.Duration

	mu       sync.Mutex
	inFlight int
	most     int
	nodes    []string
	tripped  chan struct{}
	released chan struct{}
}

func newBarrier(want int, hold, timeout time.Duration) *barrier {
	return &barrier{want: want, hold: hold, timeout: timeout, tripped: make(chan struct{}), released: make(chan struct{})}
}

// wait is called for each list of a node's pods.
func (b *barrier) wait(node string) {
	select {
	case <-b.released:
		return
	default:
	}
	b.mu.Lock()
	b.inFlight++
	b.most = max(b.most, b.inFlight)
	b.nodes = append(b.nodes, node)
	if b.inFlight == b.want {
		close(b.tripped)
		go func() { time.Sleep(b.hold); close(b.released) }()
	}
	b.mu.Unlock()
	select {
	case <-b.released:
	case <-time.After(b.timeout):
	}
	b.mu.Lock()
	b.inFlight--
	b.mu.Unlock()
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A rack of nodes asked to be fenced at once gets its fences created side by side: the node
// controller looks at --fence-concurrency nodes at once, and at no more. Each creation first
// lists the node's pods from the API server; the test holds those lists until four are in
// flight together, which one worker never reaches (its lists come one after another), and
// keeps holding a while to see that no fifth comes while four workers wait.
func TestRackFencesAreCreatedTogether(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, Controllers: []string{"serviceaccount-token-controller"}})
	ctx := context.Background()
	const workers, rack = 4, 8
	policy := &v1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "rack"},
		Spec: v1alpha1.FencingPolicySpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1"}},
			DryRun:       true, // the fences describe their steps and take none: only their creation is looked at
			Methods: []v1alpha1.Method{{Name: "executor", Type: v1alpha1.MethodExecutor,
				Timeout: &metav1.Duration{Duration: 30 * time.Second}, Executor: &v1alpha1.ExecutorMethod{}}},
		},
	}
	if err := c.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	for i := range rack {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("rack-%d", i),
			Labels:      map[string]string{"rack": "r1"},
			Annotations: map[string]string{v1alpha1.AnnotationFenceRequest: "the rack's switch died"},
		}}
		if _, err := c.Kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	b := newBarrier(workers, 500*time.Millisecond, 2*time.Second)
	cfg := rest.CopyConfig(c.Config)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if fs := r.URL.Query().Get("fieldSelector"); r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/pods") && strings.HasPrefix(fs, "spec.nodeName=") {
				b.wait(strings.TrimPrefix(fs, "spec.nodeName="))
			}
			return next.RoundTrip(r)
		})
	})
	mgr, err := app.NewManager(cfg, app.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, FenceConcurrency: workers})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})

	var fences v1alpha1.NodeFenceList
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return len(fences.Items) == rack, c.Client.List(ctx, &fences)
	})
	if err != nil {
		t.Fatalf("%d of %d fences created: %v", len(fences.Items), rack, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.tripped:
	default:
		t.Fatalf("at most %d lists of a node's pods were ever in flight together (nodes %v): the node controller did not look at %d nodes at once", b.most, b.nodes, workers)
	}
	if b.most != workers {
		t.Errorf("%d lists of a node's pods were in flight together while %d workers waited (nodes %v): the node controller looked at more nodes at once than --fence-concurrency", b.most, workers, b.nodes)
	}
}
