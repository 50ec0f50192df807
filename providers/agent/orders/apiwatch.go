package orders

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/config/names"
	"palisade.dev/palisade/providers/agent/apiclient"
)

// nodeFencePath is the NodeFence collection of the API; a NodeFence is named after its node.
const nodeFencePath = names.NodeFenceResource

// APIWatcher is the agent's second command channel: orders through the API server, for a node
// whose kubelet is down while the node itself still sees the API server. It watches this node's
// NodeFence for the palisade.dev/executor-command annotation, hands a new order to the same
// Commander as the direct channel (which runs an ID once, whichever channel brought it) while
// its fence is under way, never once the NodeFence's phase says the fence is over, and answers
// in the palisade.dev/executor-status annotation: the executor's status and a runtime read-back
// taken with it, written on every change of the status and, once Confirmed, only with a
// read-back. The watch is re-opened after any error, one interval later.
type APIWatcher struct {
	api      *apiclient.Client
	node     string
	interval time.Duration
	cmds     *Commander
	log      logr.Logger

	mu sync.Mutex
	// cmd is the order the NodeFence carries, nil for none; handed to the Commander again each
	// interval until it starts it (retake).
	cmd      *agentwire.Command
	over     string // the ID of the last order left alone because its fence is over
	reported string // "<id>/<state>" of the last answer written
	watching bool
}

// WatchConfig names the node whose NodeFence to watch, and how often to answer and retry.
type WatchConfig struct {
	Node     string
	Interval time.Duration
}

// NewAPIWatcher hands the orders on node's NodeFence to cmds.
func NewAPIWatcher(api *apiclient.Client, cfg WatchConfig, cmds *Commander, log logr.Logger) *APIWatcher {
	return &APIWatcher{api: api, node: cfg.Node, interval: cfg.Interval, cmds: cmds, log: log}
}

// Run watches and answers until ctx is done.
func (a *APIWatcher) Run(ctx context.Context) {
	go a.answerLoop(ctx)
	for ctx.Err() == nil {
		err := a.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil { // nil: the server ended the watch (timeoutSeconds), no failure
			a.setWatching(false, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(a.interval):
		}
	}
}

func (a *APIWatcher) setWatching(on bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.watching == on {
		return
	}
	a.watching = on
	if on {
		a.log.Info("watching this node's NodeFence for orders through the API server")
	} else {
		a.log.Error(err, "watching this node's NodeFence failed; retrying every interval (orders still arrive over the direct channel)")
	}
}

// watchEvent is one line of a watch stream. Object is a NodeFence, or a Status for an ERROR.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// watchedFence is what the agent reads of its NodeFence: the order annotation and the phase.
type watchedFence struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// fenceOver holds the phases of a NodeFence whose fence is over (config/v1alpha1's Released,
// Failed and Recovered): the NodeFence stays until the node's next fence replaces it, and so
// may its order, which an agent restarted since would otherwise take for a new one (its record
// of the orders it ran is in memory; the order's fencing token is the highest on disk).
var fenceOver = map[string]bool{"Released": true, "Failed": true, "Recovered": true}

// watch follows this node's NodeFence (the server sends its current state first) until the
// stream ends.
func (a *APIWatcher) watch(ctx context.Context) error {
	q := url.Values{"fieldSelector": {"metadata.name=" + a.node}, "watch": {"true"}, "timeoutSeconds": {"300"}}
	resp, err := a.api.Send(ctx, "watching the NodeFence", http.MethodGet, nodeFencePath+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	a.setWatching(true, nil)
	dec := json.NewDecoder(resp.Body)
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("reading the NodeFence watch: %w", err)
		}
		switch ev.Type {
		case "ADDED", "MODIFIED":
			var nf watchedFence
			if err := json.Unmarshal(ev.Object, &nf); err != nil {
				return fmt.Errorf("reading the NodeFence in its watch: %w", err)
			}
			a.see(ctx, nf.Metadata.Annotations[names.AnnotationExecutorCommand], nf.Status.Phase)
		case "DELETED":
			a.see(ctx, "", "")
		case "ERROR":
			return fmt.Errorf("the NodeFence watch ended with an error event")
		}
	}
}

// see takes the order annotation's current value and the NodeFence's phase. The order of a
// fence that is over is not carried out, nor answered.
func (a *APIWatcher) see(ctx context.Context, raw, phase string) {
	if raw == "" {
		a.mu.Lock()
		a.cmd = nil
		a.mu.Unlock()
		return
	}
	cmd, err := agentwire.ParseCommand(raw)
	if err != nil && cmd.ID == "" {
		// Without an ID no answer can name it: the controller waits for one until the
		// method's timeout, and nothing is carried out.
		a.log.Error(err, "ignoring a malformed order on the NodeFence: it has no ID to answer")
		return
	}
	// An order with an ID that fails its checks (an unknown action, a negative grace period or
	// token) goes to the Commander like any other: it refuses it without carrying anything out
	// or taking its token, and the refusal is answered on the NodeFence with why, as on the
	// direct channel, rather than left for the controller's method timeout to find.
	if fenceOver[phase] {
		a.leave(cmd, phase)
		return
	}
	a.mu.Lock()
	isNew := a.cmd == nil || a.cmd.ID != cmd.ID
	a.cmd = &cmd
	a.mu.Unlock()
	if isNew {
		a.log.Info("order received through the API server", "command", cmd.ID, "action", cmd.Action)
	}
	a.cmds.Handle(ctx, cmd)
}

// leave does not carry out cmd, the order of a fence that is over, and says so once per order.
func (a *APIWatcher) leave(cmd agentwire.Command, phase string) {
	a.mu.Lock()
	first := a.over != cmd.ID
	a.cmd, a.over = nil, cmd.ID
	a.mu.Unlock()
	if first {
		a.log.Info("not carrying out the order on the NodeFence: its fence is over (the order was left behind, not given again)",
			"command", cmd.ID, "phase", phase, "fencingToken", cmd.Token)
	}
}

// answerLoop hands the NodeFence's order again while it has not started (retake), and writes
// the executor's status for it every interval when it changed since the last answer.
func (a *APIWatcher) answerLoop(ctx context.Context) {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.retake(ctx)
		a.answer(ctx)
	}
}

// retake hands the NodeFence's order to the Commander again while the Commander has not
// started it: one that came while another order ran (a chain's first Executor method that
// timed out at the controller, still running here) was left for later, and the watch brings no
// new event for an annotation that does not change, so it waited for the watch's re-opening,
// minutes. The Commander runs an ID once, so handing it again is harmless.
func (a *APIWatcher) retake(ctx context.Context) {
	a.mu.Lock()
	cmd := a.cmd
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	if st := a.cmds.Status(); st != nil && st.ID == cmd.ID {
		return
	}
	a.cmds.Handle(ctx, *cmd)
}

func (a *APIWatcher) answer(ctx context.Context) {
	a.mu.Lock()
	cmd, reported := a.cmd, a.reported
	a.mu.Unlock()
	st := a.cmds.Status()
	if cmd == nil || st == nil || st.ID != cmd.ID || reported == st.ID+"/"+st.State {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, a.interval)
	defer cancel()
	rep := agentwire.APIReport{Executor: *st, RunningContainers: a.cmds.ReadBack(rctx), ReportedAt: time.Now()}
	if st.State == agentwire.ExecutorConfirmed && rep.RunningContainers == nil {
		return // a confirmation goes out only with its read-back; next interval
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{names.AnnotationExecutorStatus: string(raw)}}})
	resp, err := a.api.SendRaw(rctx, "answering on the NodeFence", http.MethodPatch, nodeFencePath+"/"+url.PathEscape(a.node), patch, "application/merge-patch+json")
	if err != nil {
		a.log.Error(err, "answering the order through the API server failed; retrying next interval", "command", st.ID, "state", st.State)
		return
	}
	apiclient.Drain(resp.Body)
	a.log.Info("answered the order through the API server", "command", st.ID, "state", st.State, "runningContainers", rep.RunningContainers)
	a.mu.Lock()
	a.reported = st.ID + "/" + st.State
	a.mu.Unlock()
}
