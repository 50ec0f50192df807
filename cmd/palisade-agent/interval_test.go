package main

import (
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/channel"
)

// TestIntervalFromController: the controller's answer carries the node's policy interval; the
// agent adopts it for its heartbeats (and says so in them), and ignores one out of range.
func TestIntervalFromController(t *testing.T) {
	for _, tc := range []struct {
		name     string
		asked    time.Duration
		wantBeat time.Duration
	}{{"policy interval adopted", 200 * time.Millisecond, 200 * time.Millisecond}, {"out of range ignored", 10 * time.Millisecond, time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			e.startServer(t, "127.0.0.1:0", func(o *channel.ServerOptions) {
				o.IntervalFor = func(string) time.Duration { return tc.asked }
			})
			k := newKubelet()
			defer k.srv.Close()
			p := e.startAgent(t, e.server.Addr(), k.srv.URL, time.Second)
			e.next(t, 5*time.Second)
			e.next(t, 5*time.Second) // the first answer set the interval (or was ignored)
			start := time.Now()
			var last agentwire.Heartbeat
			for range 4 {
				last = e.next(t, 5*time.Second)
			}
			gap := time.Since(start) / 4
			if gap < tc.wantBeat*7/10 || gap > tc.wantBeat*13/10 || last.Interval != tc.wantBeat {
				t.Errorf("heartbeats %s apart, reporting interval %s; want about %s", gap, last.Interval, tc.wantBeat)
			}
			if tc.asked == tc.wantBeat {
				p.waitForLog(t, "heartbeat interval set by the controller", time.Second)
			} else {
				p.waitForLog(t, "ignoring a heartbeat interval out of range", time.Second)
			}
		})
	}
}
