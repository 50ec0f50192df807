package agentwire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// An order annotation is outside input (anyone who may write the NodeFence writes it): a
// command the agent accepts is valid and reads back the same after a round trip; one it
// rejects yields the zero command and a message.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{
		`{"id":"c1","action":"Terminate"}`,
		`{"id":"c1","action":"Terminate","gracePeriodSeconds":0}`,
		`{"id":"c1","action":"Terminate","gracePeriodSeconds":-1}`,
		`{"id":"","action":"Terminate"}`,
		`{"id":"c1","action":"PowerOff"}`,
		`{"id":"c1","action":"Terminate","gracePeriodSeconds":1e30}`,
		`null`, `[]`, `{`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCommand(s)
		if err != nil {
			if !reflect.DeepEqual(c, Command{}) && c.Validate() == nil {
				t.Fatalf("ParseCommand(%q) failed (%v) but returned a valid command %+v", s, err, c)
			}
			if err.Error() == "" {
				t.Fatalf("ParseCommand(%q): an error without a message", s)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseCommand(%q) accepted an invalid command %+v: %v", s, c, err)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseCommand(string(b))
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip of %+v: %+v, %v", c, again, err)
		}
	})
}

// The agent's report through the API server is outside input too: an accepted report has a
// valid executor status, no negative count, and survives a round trip.
func FuzzParseAPIReport(f *testing.F) {
	for _, s := range []string{
		`{"executor":{"id":"c1","state":"Confirmed","pods":1,"containers":2},"runningContainers":0,"reportedAt":"2026-11-23T05:00:00Z"}`,
		`{"executor":{"id":"c1","state":"Running","pods":0,"containers":0}}`,
		`{"executor":{"id":"c1","state":"Failed","message":"db still runs","pods":0,"containers":0},"runningContainers":1}`,
		`{"executor":{"id":"c1","state":"Confirmed","pods":-1,"containers":0}}`,
		`{"executor":{"id":"c1","state":"Confirmed","pods":0,"containers":0},"runningContainers":-3}`,
		`{"executor":{"id":"c1","state":"Maybe"}}`,
		`{"executor":{"id":"c1","state":"Confirmed"},"reportedAt":"yesterday"}`,
		`{}`, `"x"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseAPIReport(s)
		if err != nil {
			if !reflect.DeepEqual(r, APIReport{}) {
				t.Fatalf("ParseAPIReport(%q) failed (%v) but returned %+v", s, err, r)
			}
			return
		}
		if err := r.Executor.Validate(); err != nil {
			t.Fatalf("ParseAPIReport(%q) accepted an invalid status: %v", s, err)
		}
		if r.RunningContainers != nil && *r.RunningContainers < 0 {
			t.Fatalf("ParseAPIReport(%q) accepted %d running containers", s, *r.RunningContainers)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseAPIReport(string(b))
		if err != nil || !again.ReportedAt.Equal(r.ReportedAt) {
			t.Fatalf("round trip of %+v: %+v, %v", r, again, err)
		}
		again.ReportedAt = r.ReportedAt // equal instants; the location may differ
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip of %+v: %+v", r, again)
		}
	})
}

// TruncateMessage keeps what fits, cuts only between UTF-8 sequences, and says it cut.
func FuzzTruncateMessage(f *testing.F) {
	f.Add("short")
	f.Add(strings.Repeat("é", maxExecutorMessage))
	f.Add(strings.Repeat("x", maxExecutorMessage+1))
	f.Fuzz(func(t *testing.T, msg string) {
		got := TruncateMessage(msg)
		if len(got) > maxExecutorMessage+len("… (truncated)") {
			t.Fatalf("TruncateMessage kept %d bytes", len(got))
		}
		if len(msg) <= maxExecutorMessage {
			if got != msg {
				t.Fatalf("TruncateMessage changed a message that fits")
			}
			return
		}
		if !strings.HasSuffix(got, "… (truncated)") || len(got) > maxExecutorMessage {
			t.Fatalf("TruncateMessage(%d bytes) = %d bytes, %q…", len(msg), len(got), got[:min(len(got), 20)])
		}
		if utf8.ValidString(msg) && !utf8.ValidString(got) {
			t.Fatal("TruncateMessage cut inside a UTF-8 sequence")
		}
	})
}
