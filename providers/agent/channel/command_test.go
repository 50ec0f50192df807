package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

// TestCommandDeliveredToItsNodeOnly: a pending command comes back in the responses to the
// heartbeats of its node, every one of them until cleared, and never to another node.
func TestCommandDeliveredToItsNodeOnly(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{})
	c1 := agentClient(t, p, s, "n1")
	c2 := agentClient(t, p, s, "n2")
	send := func(c *Client, node string) *agentwire.Command {
		t.Helper()
		cmd, err := c.Send(context.Background(), agentwire.Report{Node: node})
		if err != nil {
			t.Fatalf("heartbeat of %s: %v", node, err)
		}
		return cmd
	}
	if cmd := send(c1, "n1"); cmd != nil {
		t.Errorf("command %+v before any was set", cmd)
	}
	grace := int64(2)
	want := agentwire.Command{ID: "fence-1", Action: agentwire.ActionTerminate, GracePeriodSeconds: &grace}
	s.SetCommand("n1", want)
	grace = 99 // the server keeps its own copy
	want.GracePeriodSeconds = ptr.To[int64](2)
	for range 2 {
		if diff := cmp.Diff(&want, send(c1, "n1")); diff != "" {
			t.Errorf("n1's command (-want +got):\n%s", diff)
		}
		if cmd := send(c2, "n2"); cmd != nil {
			t.Errorf("n2 got n1's command %+v", cmd)
		}
	}
	replaced := agentwire.Command{ID: "fence-2", Action: agentwire.ActionTerminate}
	s.SetCommand("n1", replaced)
	if diff := cmp.Diff(&replaced, send(c1, "n1")); diff != "" {
		t.Errorf("n1's replaced command (-want +got):\n%s", diff)
	}
	s.ClearCommand("n1", "fence-1")
	if diff := cmp.Diff(&replaced, send(c1, "n1")); diff != "" {
		t.Errorf("n1's command after the previous order's ClearCommand (-want +got):\n%s", diff)
	}
	s.ClearCommand("n1", replaced.ID)
	if cmd := send(c1, "n1"); cmd != nil {
		t.Errorf("command %+v after ClearCommand", cmd)
	}
	s.SetCommand("n2", replaced)
	s.Forget("n2")
	if cmd := send(c2, "n2"); cmd != nil {
		t.Errorf("command %+v after Forget", cmd)
	}
}

// TestCommandWithheldWhenRefused: with MayCommand refusing (the replica no longer leads), a
// pending command is not handed out, and the heartbeat is still answered and recorded; once it
// allows again, the command goes out. MayCommand is asked only while a command is pending.
func TestCommandWithheldWhenRefused(t *testing.T) {
	p := newPKI(t)
	var mu sync.Mutex
	refuse, asked := errors.New("another replica leads"), 0
	s := startServer(t, p, ServerOptions{MayCommand: func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		asked++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("MayCommand asked without a deadline")
		}
		return refuse
	}})
	c := agentClient(t, p, s, "n1")
	send := func() *agentwire.Command {
		t.Helper()
		cmd, err := c.Send(context.Background(), agentwire.Report{Node: "n1", Seq: 1})
		if err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		return cmd
	}
	send()
	if asked != 0 {
		t.Errorf("MayCommand asked %d times with no command pending", asked)
	}
	want := agentwire.Command{ID: "fence-1", Action: agentwire.ActionTerminate}
	s.SetCommand("n1", want)
	if cmd := send(); cmd != nil {
		t.Errorf("command %+v handed out while MayCommand refuses", cmd)
	}
	if _, _, ok := s.Latest("n1"); !ok || asked != 1 {
		t.Errorf("heartbeat recorded %v, MayCommand asked %d times: want it recorded, asked once", ok, asked)
	}
	mu.Lock()
	refuse = nil
	mu.Unlock()
	if diff := cmp.Diff(&want, send()); diff != "" {
		t.Errorf("command once MayCommand allows (-want +got):\n%s", diff)
	}
}

// TestCommandResponseWire: the response carrying a command is a 200 with a JSON body, over
// HTTP/1.1 like every heartbeat; the heartbeat itself is recorded.
func TestCommandResponseWire(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{})
	certFile, keyFile := p.agentFiles(t, p.ca, "n1")
	s.SetCommand("n1", agentwire.Command{ID: "c1", Action: agentwire.ActionTerminate, GracePeriodSeconds: ptr.To[int64](0)})
	resp, err := rawClient(p, loadPair(t, certFile, keyFile)).Post("https://"+s.Addr()+agentwire.HeartbeatPath, "application/json", strings.NewReader(`{"node":"n1","seq":3}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/1.1" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("got %s over %s, %s; want a JSON 200 over HTTP/1.1", resp.Status, resp.Proto, resp.Header.Get("Content-Type"))
	}
	if got, want := strings.TrimSpace(string(body)), `{"command":{"id":"c1","action":"Terminate","gracePeriodSeconds":0}}`; got != want {
		t.Errorf("body %s, want %s", got, want)
	}
	if hb := s.Snapshot()["n1"]; hb.Seq != 3 {
		t.Errorf("heartbeat not recorded: %+v", hb)
	}
}

// TestExecutorStatusRoundTrip: the agent's executor status reaches the server with its
// heartbeat, is kept per node across heartbeats without one, and an invalid one is dropped
// while its heartbeat still counts.
func TestExecutorStatusRoundTrip(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{Now: func() time.Time { return t0 }})
	c1 := agentClient(t, p, s, "n1")
	c2 := agentClient(t, p, s, "n2")
	send := func(c *Client, rep agentwire.Report) {
		t.Helper()
		if _, err := c.Send(context.Background(), rep); err != nil {
			t.Fatalf("heartbeat %+v: %v", rep, err)
		}
	}
	running := agentwire.ExecutorStatus{ID: "fence-1", State: agentwire.ExecutorRunning, StartedAt: t0.Add(-time.Second).Local()}
	send(c1, agentwire.Report{Node: "n1", Seq: 1, Executor: &running})
	confirmed := running
	confirmed.State, confirmed.Pods, confirmed.Containers, confirmed.FinishedAt = agentwire.ExecutorConfirmed, 3, 5, t0
	send(c1, agentwire.Report{Node: "n1", Seq: 2, Executor: &confirmed})
	if hb := s.Snapshot()["n1"]; hb.Executor == nil || !hb.Executor.StartedAt.Equal(confirmed.StartedAt) || hb.Executor.State != agentwire.ExecutorConfirmed {
		t.Errorf("heartbeat's executor status %+v, want %+v", hb.Executor, confirmed)
	}
	send(c1, agentwire.Report{Node: "n1", Seq: 3}) // a restarted agent: no status
	send(c1, agentwire.Report{Node: "n1", Seq: 4, Executor: &agentwire.ExecutorStatus{ID: "fence-2", State: "Lying"}})
	send(c1, agentwire.Report{Node: "n1", Seq: 5, Executor: &agentwire.ExecutorStatus{State: agentwire.ExecutorConfirmed}})
	got, ok := s.ExecutorStatus("n1")
	if !ok {
		t.Fatal("no executor status for n1")
	}
	if diff := cmp.Diff(confirmed, got); diff != "" {
		t.Errorf("n1's executor status (-want +got):\n%s", diff)
	}
	if hb := s.Snapshot()["n1"]; hb.Seq != 5 || hb.Executor != nil {
		t.Errorf("latest heartbeat %+v, want seq 5 without the invalid status", hb)
	}
	failed := agentwire.ExecutorStatus{ID: "fence-9", State: agentwire.ExecutorFailed, Message: "no runtime configured", FinishedAt: t0}
	send(c2, agentwire.Report{Node: "n2", Executor: &failed})
	if got, _ := s.ExecutorStatus("n2"); got.State != agentwire.ExecutorFailed || got.Message != failed.Message {
		t.Errorf("n2's executor status %+v, want %+v", got, failed)
	}
	if got, _ := s.ExecutorStatus("n1"); got.ID != "fence-1" {
		t.Errorf("n1's status became %+v with n2's heartbeat", got)
	}
	s.Forget("n1")
	if _, ok := s.ExecutorStatus("n1"); ok {
		t.Error("n1's executor status kept after Forget")
	}
}

// TestCommandsConcurrently: commands set and cleared while agents heartbeat (run with -race):
// every command an agent gets is its own node's.
func TestCommandsConcurrently(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, ServerOptions{})
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 4 {
		node := fmt.Sprintf("n%d", i)
		c := agentClient(t, p, s, node)
		wg.Go(func() {
			for seq := range uint64(20) {
				cmd, err := c.Send(context.Background(), agentwire.Report{Node: node, Seq: seq + 1,
					Executor: &agentwire.ExecutorStatus{ID: node + "-cmd", State: agentwire.ExecutorRunning}})
				if err == nil && cmd != nil && cmd.ID != node+"-cmd" {
					err = fmt.Errorf("%s got command %s", node, cmd.ID)
				}
				errs <- err
			}
		})
		wg.Go(func() {
			for range 20 {
				s.SetCommand(node, agentwire.Command{ID: node + "-cmd", Action: agentwire.ActionTerminate})
				_, _ = s.ExecutorStatus(node)
				s.ClearCommand(node, node+"-cmd")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func agentClient(t *testing.T, p *testPKI, s *Server, node string) *Client {
	t.Helper()
	certFile, keyFile := p.agentFiles(t, p.ca, node)
	return newClient(t, p, s.Addr(), certFile, keyFile)
}
