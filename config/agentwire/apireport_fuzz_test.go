package agentwire

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// FuzzParseAPIReport checks the reader of the executor-status annotation an agent writes: a
// rejected value gives a message and no partial report, an accepted one holds the documented
// bounds and survives a write and a second read unchanged.
func FuzzParseAPIReport(f *testing.F) {
	for _, s := range []string{
		`{"executor":{"id":"c1","state":"Confirmed","pods":2,"containers":3},"runningContainers":0,"reportedAt":"2026-01-02T03:04:05Z"}`,
		`{"executor":{"id":"c1","state":"Running","pods":0,"containers":0,"startedAt":"2026-01-02T03:04:05Z"}}`,
		`{"executor":{"id":"c1","state":"Failed","message":"runc is gone","pods":0,"containers":0}}`,
		`{"executor":{"id":"c1","state":"Confirmed"},"runningContainers":-1}`,
		`{"executor":{"id":"","state":"Confirmed"}}`,
		`{"executor":{"id":"c1","state":"Done"}}`,
		`{"executor":{"id":"c1","state":"Running","pods":-1}}`,
		`{"executor":{"id":"c1","state":"Running"},"reportedAt":"yesterday"}`,
		`null`, ``, `[]`, `{"executor":`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseAPIReport(s)
		r2, err2 := ParseAPIReport(s)
		if (err == nil) != (err2 == nil) || !cmp.Equal(r, r2) {
			t.Fatalf("ParseAPIReport(%q) is not deterministic", s)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseAPIReport(%q): empty error message", s)
			}
			if !cmp.Equal(r, APIReport{}) {
				t.Fatalf("ParseAPIReport(%q) rejected but returned %+v", s, r)
			}
			return
		}
		e := r.Executor
		if e.ID == "" || e.Pods < 0 || e.Containers < 0 || len(e.Message) > maxExecutorMessage ||
			(r.RunningContainers != nil && *r.RunningContainers < 0) ||
			(e.State != ExecutorRunning && e.State != ExecutorConfirmed && e.State != ExecutorFailed) {
			t.Fatalf("ParseAPIReport(%q) accepted a report out of bounds: %+v", s, r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("writing back %+v: %v", r, err)
		}
		back, err := ParseAPIReport(string(b))
		if err != nil {
			t.Fatalf("ParseAPIReport(%s), written from an accepted %q: %v", b, s, err)
		}
		if diff := cmp.Diff(r, back); diff != "" {
			t.Fatalf("round trip of %q (-want +got):\n%s", s, diff)
		}
	})
}

// FuzzParseCommand checks the reader of the order annotation the agent takes from its NodeFence.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{
		`{"id":"c1","action":"Terminate"}`,
		`{"id":"c1","action":"Terminate","gracePeriodSeconds":0}`,
		`{"id":"c1","action":"Terminate","gracePeriodSeconds":30}`,
		`{"id":"c1","action":"Terminate","gracePeriodSeconds":-1}`,
		`{"id":"","action":"Terminate"}`,
		`{"id":"c1","action":"Reboot"}`,
		`{"id":"c1","action":"Terminate","gracePeriodSeconds":1e30}`,
		`null`, ``, `"Terminate"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCommand(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseCommand(%q): empty error message", s)
			}
			return
		}
		if c.ID == "" || c.Action != ActionTerminate || (c.GracePeriodSeconds != nil && *c.GracePeriodSeconds < 0) {
			t.Fatalf("ParseCommand(%q) accepted a command out of bounds: %+v", s, c)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("writing back %+v: %v", c, err)
		}
		back, err := ParseCommand(string(b))
		if err != nil {
			t.Fatalf("ParseCommand(%s), written from an accepted %q: %v", b, s, err)
		}
		if diff := cmp.Diff(c, back); diff != "" {
			t.Fatalf("round trip of %q (-want +got):\n%s", s, diff)
		}
	})
}

// FuzzTruncateMessage checks that a cut message always fits a status, stays valid UTF-8 when
// it was, and is untouched when it already fit.
func FuzzTruncateMessage(f *testing.F) {
	f.Add("runc is gone")
	f.Add(strings.Repeat("é", maxExecutorMessage))
	f.Add(strings.Repeat("x", maxExecutorMessage+1))
	f.Add(strings.Repeat("\xff", maxExecutorMessage+7))
	f.Fuzz(func(t *testing.T, msg string) {
		got := TruncateMessage(msg)
		if len(got) > maxExecutorMessage {
			t.Fatalf("TruncateMessage gave %d bytes, at most %d", len(got), maxExecutorMessage)
		}
		if len(msg) <= maxExecutorMessage && got != msg {
			t.Fatalf("TruncateMessage changed a message that fit")
		}
		if utf8.ValidString(msg) && !utf8.ValidString(got) {
			t.Fatalf("TruncateMessage cut inside a UTF-8 sequence")
		}
		if err := (ExecutorStatus{ID: "c", State: ExecutorFailed, Message: got}).Validate(); err != nil {
			t.Fatalf("a truncated message is refused: %v", err)
		}
	})
}
