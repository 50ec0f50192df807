package app_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	"palisade.dev/palisade/test/testbed"
)

// The controller does not ask the real API server to gzip its responses unless told to
// (--api-compression): every response its manager gets while its caches fill (the lists and
// watches of Nodes, Leases, pods, policies, fences) arrives uncompressed. With the option set,
// the same start gets compressed ones, so the test can see one.
func TestAPIResponsesUncompressedUnlessAsked(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true})
	for _, tc := range []struct {
		compression bool
		wantGzipped bool
	}{{false, false}, {true, true}} {
		responses, gzipped := startAndCount(t, c, app.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, APICompression: tc.compression})
		if responses == 0 {
			t.Fatalf("APICompression %v: the manager got no response from the API server", tc.compression)
		}
		if got := gzipped > 0; got != tc.wantGzipped {
			want := "none"
			if tc.wantGzipped {
				want = "at least one"
			}
			t.Errorf("APICompression %v: %d of %d responses came gzipped, want %s", tc.compression, gzipped, responses, want)
		}
		t.Logf("APICompression %v: %d of %d responses gzipped", tc.compression, gzipped, responses)
	}
}

// startAndCount starts the controller's manager until its caches are filled and a few seconds
// of watching have passed, and counts the API server's responses and how many of them Go's
// transport had to decompress (http.Response.Uncompressed).
func startAndCount(t *testing.T, c *testbed.Cluster, o app.Options) (responses, gzipped int) {
	t.Helper()
	var mu sync.Mutex
	cfg := rest.CopyConfig(c.Config)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(r)
			if err == nil {
				mu.Lock()
				responses++
				if resp.Uncompressed {
					gzipped++
				}
				mu.Unlock()
			}
			return resp, err
		})
	})
	mgr, err := app.NewManager(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the manager's caches did not sync within a minute")
	}
	time.Sleep(3 * time.Second) // the controllers' own first reads and writes
	stop()
	if err := <-done; err != nil {
		t.Errorf("manager: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return responses, gzipped
}
