package executor_test

import (
	"testing"
	"time"

	"palisade.dev/palisade/providers/executor"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestDeadlineOnlyShortens(t *testing.T) {
	type shorten struct {
		grace int64
		after time.Duration // since t0
	}
	tests := []struct {
		name      string
		grace     int64
		shortens  []shorten
		accepted  []bool
		wantGrace int64
		wantAt    time.Duration
	}{
		{"longer refused", 30, []shorten{{60, time.Second}}, []bool{false}, 30, 30 * time.Second},
		{"equal refused", 30, []shorten{{30, time.Second}}, []bool{false}, 30, 30 * time.Second},
		{"shorter counts from now", 30, []shorten{{10, 5 * time.Second}}, []bool{true}, 10, 15 * time.Second},
		{"then longer refused", 30, []shorten{{10, 5 * time.Second}, {20, 6 * time.Second}}, []bool{true, false}, 10, 15 * time.Second},
		{"late shortening never moves the deadline later", 30, []shorten{{10, 28 * time.Second}}, []bool{true}, 10, 30 * time.Second},
		{"zero means 1", 30, []shorten{{0, 2 * time.Second}}, []bool{true}, 1, 3 * time.Second},
		{"1 then 0 refused (both 1)", 30, []shorten{{1, 0}, {0, 0}}, []bool{true, false}, 1, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := executor.NewDeadline(t0, tt.grace)
			for i, s := range tt.shortens {
				if got := d.Shorten(s.grace, t0.Add(s.after)); got != tt.accepted[i] {
					t.Errorf("Shorten(%d) = %v, want %v", s.grace, got, tt.accepted[i])
				}
			}
			if got := d.GracePeriodSeconds(); got != tt.wantGrace {
				t.Errorf("grace = %d, want %d", got, tt.wantGrace)
			}
			if got := d.At().Sub(t0); got != tt.wantAt {
				t.Errorf("deadline = t0+%v, want t0+%v", got, tt.wantAt)
			}
		})
	}
}

// TestDeadlineKillAt holds KillAt to the kubelet's killContainer (v1.37): the grace period
// less the whole seconds of the hook and of the turn, from the stop signal, at least 2 s.
func TestDeadlineKillAt(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name       string
		grace      int64
		shorten    int64         // 0: none
		shortenAt  time.Duration // since t0
		signalled  time.Duration // since t0
		hook, turn time.Duration
		want       time.Duration // since t0
	}{
		{"no hook: SIGKILL at the grace period's end", 10, 0, 0, 0, 0, 0, 10 * time.Second},
		{"hook of whole seconds: at the grace period's end", 10, 0, 0, 3 * time.Second, 3 * time.Second, 0, 10 * time.Second},
		{"hook of 1.4 s: its fraction is not taken from the grace (kubelet truncates)", 6, 0, 0, 1400 * ms, 1400 * ms, 0, 6400 * ms},
		{"hook of 1.999 s: still 1 s taken", 6, 0, 0, 1999 * ms, 1999 * ms, 0, 6999 * ms},
		{"hook and turn truncated each", 10, 0, 0, 3800 * ms, 1900 * ms, 1900 * ms, 11800 * ms},
		{"stop signal 1 s before the end: 2 s minimum", 10, 0, 0, 9 * time.Second, 9 * time.Second, 0, 11 * time.Second},
		{"hook still running at expiry: one 2 s extension", 10, 0, 0, 10 * time.Second, 10 * time.Second, 0, 12 * time.Second},
		{"hook cut a hair before expiry: still the 2 s extension", 10, 0, 0, 10 * time.Second, 9999 * ms, 0, 12 * time.Second},
		{"sidecar's turn past expiry: 2 s minimum", 3, 0, 0, 3100 * ms, 0, 3100 * ms, 5100 * ms},
		{"sidecar's turn of 2.5 s in a 10 s grace: 8 s from its signal", 10, 0, 0, 2500 * ms, 0, 2500 * ms, 10500 * ms},
		{"shortened: the new deadline", 30, 2, time.Second, 0, 0, 0, 3 * time.Second},
		{"shortened after the stop signal's 2 s: 2 s after the signal", 30, 1, 0, 500 * ms, 0, 0, 2500 * ms},
		{"shortened to later than the kubelet's count: the kubelet's count", 5, 4, 4 * time.Second, 0, 0, 0, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := executor.NewDeadline(t0, tt.grace)
			if tt.shorten > 0 && !d.Shorten(tt.shorten, t0.Add(tt.shortenAt)) {
				t.Fatalf("Shorten(%d) refused", tt.shorten)
			}
			if got := d.KillAt(t0.Add(tt.signalled), tt.hook, tt.turn).Sub(t0); got != tt.want {
				t.Errorf("KillAt = t0+%v, want t0+%v", got, tt.want)
			}
		})
	}
}

func TestDeadlineWaitFollowsShorten(t *testing.T) {
	d := executor.NewDeadline(time.Now(), 30)
	go func() {
		time.Sleep(50 * time.Millisecond)
		d.Shorten(1, time.Now().Add(-time.Second)) // as if given a second ago: due now
	}()
	start := time.Now()
	if !d.Wait(nil, nil) {
		t.Fatal("Wait returned without the deadline passing")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Wait took %v after the deadline was shortened", took)
	}
	done := make(chan struct{})
	close(done)
	if executor.NewDeadline(time.Now(), 30).Wait(done, nil) {
		t.Error("Wait reported expiry for a closed done channel")
	}
}
