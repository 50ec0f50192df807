package fencing

import (
	"context"
	"fmt"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
)

// BenchmarkAgentLossScan5000 is one tick of the agent loss watch (four a second) over 5000
// agents heard lately, the asked intervals behind the controller's memo (a lock and a lookup
// per read), as the controller runs it.
func BenchmarkAgentLossScan5000(b *testing.B) {
	const n = 5000
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	hbs := make(heartbeats, n)
	for i := range n {
		name := fmt.Sprintf("worker-%04d.rack-%02d.example.internal", i, i/40)
		hbs[name] = agentwire.Heartbeat{Node: name, Received: now.Add(-time.Duration(i%1000) * time.Millisecond), Interval: time.Second}
	}
	asked := newIntervalMemo(func(string) time.Duration { return time.Second }, func() time.Time { return now }, time.Minute)
	w := newAgentLossWatch(hbs, asked.get, func() time.Time { return now })
	for name := range hbs {
		w.known[name] = now // heard before: the scans send none as first heard
	}
	ctx := context.Background()
	b.ReportAllocs()
	start, scans := time.Now(), 0
	for b.Loop() {
		w.scan(ctx)
		scans++
	}
	fmt.Printf("BENCH agent_loss_scan nodes=%d us=%.0f\n", n, float64(time.Since(start).Microseconds())/float64(scans))
}
