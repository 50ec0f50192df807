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

func TestDeadlineKillAt(t *testing.T) {
	d := executor.NewDeadline(t0, 10)
	tests := []struct {
		name      string
		signalled time.Duration
		want      time.Duration
	}{
		{"stop signal early: SIGKILL at the deadline", 0, 10 * time.Second},
		{"stop signal 2 s before: at the deadline", 8 * time.Second, 10 * time.Second},
		{"stop signal 1 s before: 2 s minimum", 9 * time.Second, 11 * time.Second},
		{"stop signal at expiry (preStop still running): one 2 s extension", 10 * time.Second, 12 * time.Second},
		{"stop signal after expiry (sidecar's turn): 2 s minimum", 11 * time.Second, 13 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := d.KillAt(t0.Add(tt.signalled)).Sub(t0); got != tt.want {
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
