package orders

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
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
