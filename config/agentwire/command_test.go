package agentwire

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/utils/ptr"
)

func TestCommandValidate(t *testing.T) {
	for _, tc := range []struct {
		cmd Command
		ok  bool
	}{
		{Command{ID: "a", Action: ActionTerminate}, true},
		{Command{ID: "a", Action: ActionTerminate, GracePeriodSeconds: ptr.To[int64](0)}, true},
		{Command{Action: ActionTerminate}, false},
		{Command{ID: "a", Action: "Reboot"}, false},
		{Command{ID: "a", Action: ActionTerminate, GracePeriodSeconds: ptr.To[int64](-1)}, false},
		{Command{ID: "a", Action: ActionTerminate, Token: 7}, true},
		{Command{ID: "a", Action: ActionTerminate, Token: -7}, false},
	} {
		if err := tc.cmd.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.cmd, err, tc.ok)
		}
	}
}

func TestExecutorStatusReasonBounded(t *testing.T) {
	ok := ExecutorStatus{ID: "a", State: ExecutorFailed, Reason: ReasonStaleToken}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
	long := ExecutorStatus{ID: "a", State: ExecutorFailed, Reason: strings.Repeat("R", maxExecutorReason+1)}
	if err := long.Validate(); err == nil {
		t.Errorf("Validate accepted a %d-byte reason", len(long.Reason))
	}
}

// An executor status's boot ID is bounded like a heartbeat's: it is recorded on the NodeFence.
func TestExecutorStatusBootIDBounded(t *testing.T) {
	ok := ExecutorStatus{ID: "a", State: ExecutorConfirmed, BootID: "8d4c1e2a-5b6f-4c3d-9e8f-0a1b2c3d4e5f"}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
	long := ExecutorStatus{ID: "a", State: ExecutorConfirmed, BootID: strings.Repeat("b", MaxBootID+1)}
	if err := long.Validate(); err == nil {
		t.Errorf("Validate accepted a %d-byte boot ID", len(long.BootID))
	}
}

func TestTruncateMessage(t *testing.T) {
	if got := TruncateMessage("short"); got != "short" {
		t.Errorf("TruncateMessage(short) = %q", got)
	}
	long := strings.Repeat("é", maxExecutorMessage) // 2 bytes each
	got := TruncateMessage(long)
	if len(got) > maxExecutorMessage || !utf8.ValidString(got) || !strings.HasSuffix(got, "(truncated)") {
		t.Errorf("TruncateMessage: %d bytes, valid UTF-8 %v, suffix %q", len(got), utf8.ValidString(got), got[len(got)-20:])
	}
	if err := (ExecutorStatus{ID: "a", State: ExecutorFailed, Message: got}).Validate(); err != nil {
		t.Errorf("a truncated message is refused: %v", err)
	}
	encoded, _ := json.Marshal(Report{Node: "n", Executor: &ExecutorStatus{ID: "a", State: ExecutorFailed, Message: got}})
	if len(encoded) >= MaxBodyBytes {
		t.Errorf("a heartbeat with the longest message takes %d bytes, the server reads %d", len(encoded), MaxBodyBytes)
	}
}

// agentClient is a Client of s with a certificate for node.
