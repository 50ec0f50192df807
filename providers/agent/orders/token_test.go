package orders

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
)

// handle gives c a Terminate command with id and token and returns the status it ends in. The
// Commander has no runtime: a command carried out fails with ErrNoRuntime and no Reason; a
// refused one fails with the refusal's Reason.
func handle(t *testing.T, c *Commander, id string, token int64) agentwire.ExecutorStatus {
	t.Helper()
	c.Handle(context.Background(), agentwire.Command{ID: id, Action: agentwire.ActionTerminate, Token: token})
	c.Wait()
	st := c.Status()
	if st == nil || st.ID != id || st.State != agentwire.ExecutorFailed {
		t.Fatalf("command %s (token %d): status %+v, want it Failed", id, token, st)
	}
	return *st
}

func carriedOut(st agentwire.ExecutorStatus) bool {
	return st.Reason == "" && st.Message == ErrNoRuntime.Error()
}

// TestOlderTokenRefused: an order whose fencing token is older than one the agent took is
// refused and says so; an order of the same fence (same token) and of a later one are taken.
func TestOlderTokenRefused(t *testing.T) {
	c := NewCommander(Config{Timeout: time.Second, StateDir: t.TempDir()}, logr.Discard())
	if st := handle(t, c, "fence-5", 5); !carriedOut(st) {
		t.Fatalf("first order refused: %+v", st)
	}
	for _, tc := range []struct {
		id    string
		token int64
		want  []string
	}{
		{"fence-3", 3, []string{"order fence-3 carries fencing token 3", "older than token 5", "never carried out"}},
		{"fence-4", 4, []string{"fencing token 4", "token 5"}},
		{"no-token", 0, []string{"carries no fencing token", "token 5"}},
	} {
		st := handle(t, c, tc.id, tc.token)
		if st.Reason != agentwire.ReasonStaleToken || carriedOut(st) {
			t.Errorf("order %s with token %d: %+v, want refused (%s)", tc.id, tc.token, st, agentwire.ReasonStaleToken)
		}
		for _, w := range tc.want {
			if !strings.Contains(st.Message, w) {
				t.Errorf("order %s: message %q lacks %q", tc.id, st.Message, w)
			}
		}
	}
	// The same fence's next order (a retry with a new ID) and a later fence's are taken.
	if st := handle(t, c, "fence-5-retry", 5); !carriedOut(st) {
		t.Errorf("a retry of the latest fence refused: %+v", st)
	}
	if st := handle(t, c, "fence-9", 9); !carriedOut(st) {
		t.Errorf("a later fence's order refused: %+v", st)
	}
	if got := c.FencingToken(); got != 9 {
		t.Errorf("FencingToken() = %d, want 9", got)
	}
	// A refused order is not taken later either: its ID is done.
	c.Handle(context.Background(), agentwire.Command{ID: "fence-3", Action: agentwire.ActionTerminate, Token: 3})
	c.Wait()
	if st := c.Status(); st.ID != "fence-9" {
		t.Errorf("a refused ID was handled again: %+v", st)
	}
}

// TestTokenOutlivesRestart: the highest token is on disk before the order is carried out, and
// a new agent on the same state directory refuses what the old one would have.
func TestTokenOutlivesRestart(t *testing.T) {
	dir := t.TempDir()
	c := NewCommander(Config{Timeout: time.Second, StateDir: dir}, logr.Discard())
	handle(t, c, "fence-7", 7)
	raw, err := os.ReadFile(filepath.Join(dir, TokenFile))
	if err != nil || string(raw) != "7\n" {
		t.Fatalf("token file: %q, %v; want \"7\\n\"", raw, err)
	}
	restarted := NewCommander(Config{Timeout: time.Second, StateDir: dir}, logr.Discard())
	if got := restarted.FencingToken(); got != 7 {
		t.Errorf("after a restart FencingToken() = %d, want 7", got)
	}
	if st := handle(t, restarted, "fence-6", 6); st.Reason != agentwire.ReasonStaleToken {
		t.Errorf("after a restart an older order: %+v, want refused", st)
	}
	if st := handle(t, restarted, "fence-7-again", 7); !carriedOut(st) {
		t.Errorf("after a restart the latest fence's order: %+v, want taken", st)
	}
	// Without a state directory the token lives in memory: a restart forgets it (the agent
	// warns at start), but within one run older orders are refused all the same.
	mem := NewCommander(Config{Timeout: time.Second}, logr.Discard())
	handle(t, mem, "a", 2)
	if st := handle(t, mem, "b", 1); st.Reason != agentwire.ReasonStaleToken {
		t.Errorf("in memory, an older order: %+v, want refused", st)
	}
}

// TestTokenNotRecordedRefuses: an agent that cannot read or write its token refuses every order
// (it cannot tell an older one from a newer one), says why and names the file.
func TestTokenNotRecordedRefuses(t *testing.T) {
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, TokenFile), []byte("twelve\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A state directory that does not exist yet reads as no token; a file put in its place
	// before the first order makes the write fail (root ignores permission bits).
	notADir := filepath.Join(t.TempDir(), "state")
	for _, tc := range []struct {
		name, dir string
		want      []string
	}{
		{"malformed file", broken, []string{filepath.Join(broken, TokenFile), `"twelve\n"`, "fix it or remove it"}},
		{"state directory not writable", notADir, []string{"recording fencing token 3 before carrying order x out", "not a directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCommander(Config{Timeout: time.Second, StateDir: tc.dir}, logr.Discard())
			if tc.dir == notADir {
				if err := os.WriteFile(notADir, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			st := handle(t, c, "x", 3)
			if st.Reason != agentwire.ReasonTokenNotRecorded || carriedOut(st) {
				t.Errorf("status %+v, want refused (%s)", st, agentwire.ReasonTokenNotRecorded)
			}
			for _, w := range tc.want {
				if !strings.Contains(st.Message, w) {
					t.Errorf("message %q lacks %q", st.Message, w)
				}
			}
			if got := c.FencingToken(); got != 0 {
				t.Errorf("FencingToken() = %d after a refusal, want 0", got)
			}
		})
	}
}
