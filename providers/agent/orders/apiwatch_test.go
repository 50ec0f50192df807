package orders

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/config/names"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/agentapi"
)

// fakeAPI serves the watch of node n1's NodeFence: every watch sends the NodeFence's current
// state as an ADDED event, then the MODIFIED events in modified, then ends.
type fakeAPI struct {
	order    agentwire.Command
	raw      string // the order annotation as it stands, when set (else order's JSON)
	phase    string
	modified int
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != names.NodeFenceResource || r.URL.Query().Get("watch") != "true" {
		http.Error(w, "unexpected request "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
		return
	}
	raw, _ := json.Marshal(f.order)
	if f.raw != "" {
		raw = []byte(f.raw)
	}
	nf := map[string]any{
		"metadata": map[string]any{"name": "n1", "annotations": map[string]string{names.AnnotationExecutorCommand: string(raw)}},
		"status":   map[string]any{"phase": f.phase},
	}
	enc := json.NewEncoder(w)
	_ = enc.Encode(map[string]any{"type": "ADDED", "object": nf})
	for range f.modified {
		_ = enc.Encode(map[string]any{"type": "MODIFIED", "object": nf})
	}
}

// newWatcher is an APIWatcher of node n1 on the API server srv, handing orders to cmds.
func newWatcher(t *testing.T, srv *httptest.Server, cmds *Commander, log logr.Logger) *APIWatcher {
	t.Helper()
	api := agentapi.StandIn(t, srv)
	return NewAPIWatcher(api, WatchConfig{Node: "n1", Interval: time.Second}, cmds, log)
}

// An agent restarted after a fence ends (a rollout, an OOM kill, the node's reboot) sees the
// fence's NodeFence again, and its order, with a token equal to the one on disk and no memory
// of having run it: it must not carry it out once the fence is over (invariant 4: a node back
// in service is healthy), and says so once. The order of a fence under way is carried out.
func TestOrderOfAnEndedFenceNotCarriedOut(t *testing.T) {
	order := agentwire.Command{ID: "f1/executor", Action: agentwire.ActionTerminate, Token: 7}
	for _, tc := range []struct {
		phase     string
		carryOut  bool
		leftAlone int // "not carrying out" log lines
	}{
		{string(v1alpha1.PhaseReleased), false, 1},
		{string(v1alpha1.PhaseRecovered), false, 1},
		{string(v1alpha1.PhaseFailed), false, 1},
		{"", true, 0},
		{string(v1alpha1.PhasePending), true, 0},
		{string(v1alpha1.PhaseFencing), true, 0},
		{string(v1alpha1.PhaseFenced), true, 0},
		{string(v1alpha1.PhaseReleasing), true, 0},
	} {
		t.Run("phase "+tc.phase, func(t *testing.T) {
			dir := t.TempDir()
			before := NewCommander(Config{Timeout: time.Second, StateDir: dir}, logr.Discard())
			if st := handle(t, before, order.ID, order.Token); !carriedOut(st) {
				t.Fatalf("the order while its fence ran: %+v, want carried out", st)
			}
			var mu sync.Mutex
			var lines []string
			log := funcr.New(func(prefix, args string) {
				mu.Lock()
				defer mu.Unlock()
				lines = append(lines, args)
			}, funcr.Options{})
			srv := httptest.NewTLSServer(&fakeAPI{order: order, phase: tc.phase, modified: 2})
			defer srv.Close()
			restarted := NewCommander(Config{Timeout: time.Second, StateDir: dir}, logr.Discard())
			w := newWatcher(t, srv, restarted, log)
			for range 2 { // a watch re-opened sends the NodeFence again
				if err := w.watch(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			restarted.Wait()
			st := restarted.Status()
			if got := st != nil && st.ID == order.ID && carriedOut(*st); got != tc.carryOut {
				t.Errorf("after a restart, the order on a NodeFence in phase %q: status %+v; carried out %v, want %v", tc.phase, st, got, tc.carryOut)
			}
			if !tc.carryOut && st != nil {
				t.Errorf("the order of an ended fence reached the commander: %+v", st)
			}
			mu.Lock()
			defer mu.Unlock()
			var left int
			for _, l := range lines {
				if strings.Contains(l, "not carrying out the order") {
					left++
					for _, w := range []string{`"command"="f1/executor"`, `"phase"="` + tc.phase + `"`, "its fence is over"} {
						if !strings.Contains(l, w) {
							t.Errorf("log line %s lacks %s", l, w)
						}
					}
				}
			}
			if left != tc.leftAlone {
				t.Errorf("%d log lines saying the order is not carried out, want %d: %q", left, tc.leftAlone, lines)
			}
		})
	}
}

// An order that comes through the API server while another runs (a chain's first Executor
// method timed out at the controller and still runs here) is left for later by the Commander;
// the watch brings no new event for an annotation that does not change, so the watcher hands
// it again every interval, and it starts within one interval of the other's end (before, it
// waited for the watch to be re-opened: minutes).
func TestOrderLeftWhileAnotherRanIsTakenUp(t *testing.T) {
	cmds := NewCommander(Config{Timeout: time.Second, StateDir: t.TempDir()}, logr.Discard())
	cmds.mu.Lock()
	cmds.busy = "f0/executor" // another order runs
	cmds.mu.Unlock()
	order := agentwire.Command{ID: "f1/executor", Action: agentwire.ActionTerminate, Token: 7}
	srv := httptest.NewTLSServer(&fakeAPI{order: order, phase: string(v1alpha1.PhaseFencing)})
	defer srv.Close()
	w := newWatcher(t, srv, cmds, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.watch(ctx); err != nil {
		t.Fatal(err)
	}
	if st := cmds.Status(); st != nil && st.ID == order.ID {
		t.Fatalf("the order started while another ran (%+v): the test did not test", st)
	}
	cmds.mu.Lock()
	cmds.busy = "" // the other order ended
	cmds.mu.Unlock()
	go w.answerLoop(ctx)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if st := cmds.Status(); st != nil && st.ID == order.ID {
			cmds.Wait()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("the order on the NodeFence did not start within 3 s of the other's end (interval 1 s): status %+v", cmds.Status())
}

// An order on the NodeFence that fails its checks but has an ID (an unknown action, a negative
// grace period or token: a hand edit, a controller of another version) is refused: the answer
// says Failed and why, nothing is carried out, and its token is not taken (a valid order with
// the same token is carried out after it). One without an ID, or not JSON, cannot be answered:
// nothing reaches the Commander.
func TestMalformedOrderIsRefusedAndAnswered(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      string // in the refusal's message; "" for no answer
	}{
		{"unknown action", `{"id":"f1/executor","action":"Reboot","token":7}`, `unknown action "Reboot"`},
		{"negative grace period", `{"id":"f1/executor","action":"Terminate","gracePeriodSeconds":-1,"token":7}`, "negative grace period"},
		{"negative token", `{"id":"f1/executor","action":"Terminate","token":-7}`, "negative fencing token"},
		{"no ID", `{"action":"Terminate","token":7}`, ""},
		{"not JSON", `Terminate everything`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewTLSServer(&fakeAPI{raw: tc.raw, phase: string(v1alpha1.PhaseFencing), modified: 1})
			defer srv.Close()
			cmds := NewCommander(Config{Timeout: time.Second, StateDir: t.TempDir()}, logr.Discard())
			w := newWatcher(t, srv, cmds, logr.Discard())
			if err := w.watch(context.Background()); err != nil {
				t.Fatal(err)
			}
			cmds.Wait()
			st := cmds.Status()
			if tc.want == "" {
				if st != nil {
					t.Fatalf("an order that cannot be answered reached the commander: %+v", st)
				}
				return
			}
			if st == nil || st.ID != "f1/executor" || st.State != agentwire.ExecutorFailed || !strings.Contains(st.Message, tc.want) || carriedOut(*st) {
				t.Fatalf("status %+v: want f1/executor refused (Failed) saying %q, nothing carried out", st, tc.want)
			}
			w.mu.Lock()
			answering := w.cmd != nil && w.cmd.ID == st.ID
			w.mu.Unlock()
			if !answering {
				t.Errorf("the watcher does not hold the refused order, so its answer loop never writes the refusal")
			}
			if got := handle(t, cmds, "f1/executor-again", 7); !carriedOut(got) {
				t.Errorf("a valid order with token 7 after the refusal: %+v, want carried out (the refused order took no token)", got)
			}
		})
	}
}
