package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// check-metrics, the chart's helm test, finds the metric once a replica serves it, and fails
// saying why when none does.
func TestCheckMetrics(t *testing.T) {
	ready := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready {
			http.Error(w, "no endpoints", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("# HELP palisade_controller_blind x\n# TYPE palisade_controller_blind gauge\npalisade_controller_blind 0\n"))
	}))
	defer srv.Close()
	ctx := context.Background()
	err := checkMetrics(ctx, srv.URL, "palisade_controller_blind", 2, 10*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "after 2 attempts") {
		t.Errorf("no replica ready: %v, want a failure naming the last answer and the attempts", err)
	}
	ready = true
	if err := checkMetrics(ctx, srv.URL, "palisade_controller_blind", 2, 10*time.Millisecond); err != nil {
		t.Errorf("a ready replica: %v", err)
	}
	if err := checkMetrics(ctx, srv.URL, "palisade_controller", 1, 0); err == nil || !strings.Contains(err.Error(), "is not among them") {
		t.Errorf("a metric name that is only a prefix of one served: %v, want not found", err)
	}
	for _, args := range [][]string{{}, {"--url", srv.URL, "--attempts", "0"}, {"--url", srv.URL, "extra"}} {
		if err := runCheckMetrics(args); err == nil {
			t.Errorf("check-metrics %q: accepted", args)
		}
	}
	if err := runCheckMetrics([]string{"--url", srv.URL, "--attempts", "1"}); err != nil {
		t.Errorf("check-metrics --url: %v", err)
	}
}
