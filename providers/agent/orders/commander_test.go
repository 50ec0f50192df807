package orders

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/executor/child"
	"palisade.dev/palisade/providers/executor/child/childtest"
)

// TestCommanderRunsEachIDOnce: a command ID is carried out once; a new ID waits while another
// command runs.
func TestCommanderRunsEachIDOnce(t *testing.T) {
	c := NewCommander(Config{Timeout: time.Second}, logr.Discard())
	ctx := context.Background()
	c.Handle(ctx, agentwire.Command{ID: "a", Action: agentwire.ActionTerminate})
	c.wg.Wait()
	first := c.Status()
	if first == nil || first.ID != "a" || first.State != agentwire.ExecutorFailed || first.Message != ErrNoRuntime.Error() {
		t.Fatalf("status %+v, want a Failed: no runtime configured", first)
	}
	c.Handle(ctx, agentwire.Command{ID: "a", Action: agentwire.ActionTerminate})
	c.wg.Wait()
	if again := c.Status(); !again.StartedAt.Equal(first.StartedAt) {
		t.Errorf("command a ran again: %+v", again)
	}
	c.mu.Lock()
	c.busy = "other" // a command still running
	c.mu.Unlock()
	c.Handle(ctx, agentwire.Command{ID: "b", Action: agentwire.ActionTerminate})
	if st := c.Status(); st.ID != "a" || c.seen["b"] {
		t.Errorf("command b started while another ran: %+v", st)
	}
	c.mu.Lock()
	c.busy = ""
	c.mu.Unlock()
	c.Handle(ctx, agentwire.Command{ID: "b", Action: agentwire.ActionTerminate})
	c.wg.Wait()
	if st := c.Status(); st.ID != "b" || st.State != agentwire.ExecutorFailed {
		t.Errorf("command b once free: %+v", st)
	}
}

// TestGraceCutsInStatus: the pods whose grace period the executor cut to fit --executor-timeout
// are named in the command's status, with the grace they had and got, on a Confirmed status
// and after the error of a Failed one, so that the controller's NodeFence shows them.
func TestGraceCutsInStatus(t *testing.T) {
	const cuts = `"graceCuts":[{"pod":"db/db-0","from":300,"to":105},{"pod":"db/db-1","from":300,"to":105}]`
	const want = "the time limit (--executor-timeout 2m0s) cut the grace period of 2 pods: db/db-0 cut from 300s to 105s, db/db-1 cut from 300s to 105s"
	for _, tc := range []struct {
		name, answer, wantState, wantMessage string
	}{
		{"confirmed", `"pods":2,"containers":2,` + cuts, agentwire.ExecutorConfirmed, want},
		{"failed", `"pods":2,"containers":2,"error":"confirming: still running",` + cuts, agentwire.ExecutorFailed, "confirming: still running; " + want},
		{"nothing cut", `"pods":2,"containers":2`, agentwire.ExecutorConfirmed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The fake executor answers a connect with its version, a terminate with tc.answer.
			script := `while read -r line; do
	id=$(echo "$line" | sed 's/.*"id":\([0-9]*\).*/\1/')
	case "$line" in
	*'"op":"terminate"'*) echo "{\"id\":$id,` + strings.ReplaceAll(tc.answer, `"`, `\"`) + `}" ;;
	*) echo "{\"id\":$id,\"version\":2}" ;;
	esac
done`
			c := NewCommander(Config{Timeout: 2 * time.Minute, BootID: "boot-1", Executor: child.Config{
				Binary: childtest.FakeExecutor(t, script), CRIEndpoint: "unix:///run/containerd/containerd.sock",
			}}, logr.Discard())
			defer c.Close()
			c.Handle(context.Background(), agentwire.Command{ID: "a", Action: agentwire.ActionTerminate})
			c.Wait()
			st := c.Status()
			if st.State != tc.wantState || st.Message != tc.wantMessage {
				t.Errorf("status %s %q, want %s %q", st.State, st.Message, tc.wantState, tc.wantMessage)
			}
			if st.BootID != "boot-1" {
				t.Errorf("status boot ID %q, want the agent's, boot-1", st.BootID)
			}
		})
	}
}
