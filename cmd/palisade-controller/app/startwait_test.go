package app

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"

	"palisade.dev/palisade/test/testbed"
)

// doorProxy is the API server at cfg behind a door: it answers 503 Service Unavailable (as an
// API server that is starting, or shedding load, does) until open is set, and forwards every
// request with cfg's credentials after. Its own TLS certificate is the one httptest makes.
type doorProxy struct {
	srv     *httptest.Server
	open    atomic.Bool
	refused atomic.Int64
}

func newDoorProxy(t *testing.T, cfg *rest.Config) *doorProxy {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fwd := httputil.NewSingleHostReverseProxy(u)
	fwd.Transport = upstream
	p := &doorProxy{}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.open.Load() {
			p.refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the API server is starting","reason":"ServiceUnavailable","code":503}`)
			return
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// config is a client configuration that reaches the API server through the door.
func (p *doorProxy) config() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	return &rest.Config{Host: p.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

// The controller started while the API server does not answer waits for it, saying so, and
// builds its manager once it answers, instead of exiting (and waiting out the kubelet's
// CrashLoopBackOff); an API server that never answers is given up on after startWait with an
// error that says how long it waited. An option refused before the API server is asked is
// not waited on (TestNewManagerRefusesNegativeFenceConcurrency, whose API server never answers).
func TestNewManagerWaitsForTheAPIServer(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true})
	defer func(first, wait time.Duration) { startRetryFirst, startWait = first, wait }(startRetryFirst, startWait)
	startRetryFirst = 100 * time.Millisecond

	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	p := newDoorProxy(t, c.Config)
	time.AfterFunc(1500*time.Millisecond, func() { p.open.Store(true) })
	start := time.Now()
	mgr, err := NewManager(p.config(), Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, Logger: log})
	if err != nil || mgr == nil {
		t.Fatalf("NewManager while the API server answered only after 1.5 s: %v", err)
	}
	if took := time.Since(start); took < 1500*time.Millisecond || p.refused.Load() == 0 {
		t.Errorf("built after %s with %d requests refused: want it to have waited for the API server", took, p.refused.Load())
	}
	mu.Lock()
	said := 0
	for _, l := range lines {
		if strings.Contains(l, "the API server does not answer yet; trying again") && strings.Contains(l, `"giveUpAfter"="2m0s"`) {
			said++
		}
	}
	mu.Unlock()
	if said == 0 {
		t.Errorf("no log line says the controller waits for the API server: %q", lines)
	}

	startWait = 2 * time.Second
	never := newDoorProxy(t, c.Config)
	start = time.Now()
	_, err = NewManager(never.config(), Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, Logger: log})
	if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "the API server did not answer for") || took > 10*time.Second {
		t.Errorf("NewManager with an API server that never answers: %v after %s, want it given up on after about %s, saying so", err, took, startWait)
	}
}

// A certificate the client does not trust is not waited for: waiting does not change it.
func TestNewManagerDoesNotWaitForAnUntrustedCertificate(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	start := time.Now()
	_, err := NewManager(&rest.Config{Host: srv.URL}, Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	if err == nil || !strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), "did not answer for") || time.Since(start) > 30*time.Second {
		t.Errorf("NewManager against an untrusted certificate: %v after %s, want the certificate error at once", err, time.Since(start))
	}
}
