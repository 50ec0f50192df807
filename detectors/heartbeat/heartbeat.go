package heartbeat

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
)

// Config is what the heartbeats say and where the kubelet answers.
type Config struct {
	// Node is this node's name; BootID its boot ID ("" when unknown).
	Node, BootID string
	// Interval is the heartbeat interval until the controller answers with its policy's.
	Interval time.Duration
	// CallTimeout bounds one exchange with the controller (capped by the interval).
	CallTimeout time.Duration
	// KubeletHealthz is the URL of the kubelet's healthz endpoint.
	KubeletHealthz string
	// ProbePort is the port this node accepts its peers' probes on (0: none), ProbeHost the
	// address peers probe it at ("" for the one the controller sees), KubeletPort the kubelet's
	// port, which peers probe too.
	ProbePort   int
	ProbeHost   string
	KubeletPort int
}

// Exchanger sends one Report to the controller and returns its answer. An error with a
// StatusCode() int method is the controller's refusal: it was reached.
type Exchanger interface {
	Exchange(ctx context.Context, rep agentwire.Report) (agentwire.Response, error)
}

// Orders carries out the controller's commands and reports on them.
type Orders interface {
	// Status is the latest command's status, nil before the first.
	Status() *agentwire.ExecutorStatus
	// ReadBack counts the workload containers still running, nil when unknown; within ctx.
	ReadBack(ctx context.Context) *int
	// Handle starts cmd in the background unless it ran before.
	Handle(ctx context.Context, cmd agentwire.Command)
	// Changed gets a token when the status changes.
	Changed() <-chan struct{}
}

// Prober probes the peers the controller assigns.
type Prober interface {
	Reports() []agentwire.PeerReport
	SetTargets(targets []agentwire.PeerTarget)
	SetInterval(d time.Duration)
	// AnyAcknowledged says whether a peer's agent acknowledged a probe younger than within: a
	// path the controller sees, through that peer's ProbedBy.
	AnyAcknowledged(within time.Duration) bool
	// ProbedBy are the peers whose probes of this node the agent acknowledged within the last
	// within, each with the latest time (peers.ProbeServer).
	ProbedBy(within time.Duration) []agentwire.PeerReport
}

// Reachability is what one heartbeat round found reachable from this node, counted as the
// controller would see it: the self-fencer relies on it being isolated exactly when the
// controller hears nothing from the node on any path (the SelfFence method confirms on that
// silence).
type Reachability struct {
	Controller, API, Peers bool
}

// reachability is one round's Reachability. The controller counts as reached only by a
// heartbeat it accepted (one it refused, a bad or expired certificate, is no signal there). The
// API server counts only while the kubelet answers healthy: the controller hears the node
// through the API server by the kubelet's Lease renewals, not by the agent's probe, so a node
// whose kubelet is down is silent on that path however well its agent reaches the API server.
// A peer counts only when its agent acknowledged a probe (peers is Prober.AnyAcknowledged): the
// controller hears of that path only through the peer's heartbeats (ProbedBy), not through the
// node's own probe reports nor a peer's kubelet port answering.
func reachability(sent, apiReachable, kubeletHealthy, peers bool) Reachability {
	return Reachability{Controller: sent, API: apiReachable && kubeletHealthy, Peers: peers}
}

// pathWindow is how many intervals a peer path counts after its last acknowledged probe, on
// both sides: the agent that probed counts itself connected that long, and the agent that
// acknowledged reports the probe in its heartbeats that long, so that at least one of them
// carries it to the controller (which keeps the latest acknowledgement of each node's probes
// beyond the heartbeats that carried it: observe.Observer.LastSignal). Counted from the probe's
// sending, the prober's window never outlasts the moment the peer recorded plus two of the
// prober's intervals; the SelfFence method's safeAfter covers them (with the agent's own
// delays: four intervals in all).
const pathWindow = 2

// Fencer watches the node's reachability (the self-fencer).
type Fencer interface {
	// ProbeAPIServer says whether the API server answers, within half an interval.
	ProbeAPIServer(ctx context.Context) bool
	// Observe takes one round's reachability.
	Observe(ctx context.Context, r Reachability, now time.Time)
	// Within is how long after the node was last reached it has fenced itself at the latest;
	// 0 when it does not fence itself (Report.SelfFenceWithinMillis).
	Within() time.Duration
}

// Heartbeater checks the kubelet and sends one heartbeat per interval. It logs changes (kubelet
// health, the controller refusing or becoming unreachable, and recovery), not every beat.
type Heartbeater struct {
	opts    Config
	client  Exchanger
	kubelet *http.Client
	log     logr.Logger
	cmds    Orders
	fence   Fencer // nil: no self-fencing
	peers   Prober // nil: no peer probing

	// interval is the heartbeat interval in force: Config.Interval until the controller answers
	// with its policy's.
	interval       time.Duration
	seq            uint64
	instance       string // this process's, drawn at New: seq orders its heartbeats
	kubeletHealthy *bool  // nil until the first check
	sendState      string // of the last heartbeat: "" before the first, "accepted", "refused <code>", "unreachable"
	withinTooLong  bool   // the self-fence promise exceeded agentwire.MaxSelfFenceWithinMillis (said once)
}

// New returns a Heartbeater sending to c and handing commands to cmds; fence and peers may be
// nil (no self-fencing, no peer probing).
func New(o Config, c Exchanger, cmds Orders, fence Fencer, peers Prober, log logr.Logger) *Heartbeater {
	// The kubelet's healthz is plain HTTP on loopback: never through a proxy.
	tr := &http.Transport{Proxy: nil, MaxIdleConns: 1, IdleConnTimeout: 4 * o.Interval}
	return &Heartbeater{opts: o, client: c, kubelet: &http.Client{Transport: tr}, log: log, cmds: cmds, fence: fence, peers: peers, interval: o.Interval,
		instance: rand.Text()}
}

// Seq is the number of heartbeats sent; read it once Run returned.
func (h *Heartbeater) Seq() uint64 { return h.seq }

// Interval is the heartbeat interval in force (the controller may have asked for a longer one);
// read it once Run returned.
func (h *Heartbeater) Interval() time.Duration { return h.interval }

// Run beats at once, then every interval until ctx is done, and at once when the executor's
// status changes or the controller asked for a longer interval (the controller judges an agent
// by the interval its heartbeats report, so it learns the longer one now, not one new interval
// later). A beat that runs late (a slow kubelet or controller) delays the next tick instead of
// piling up beats.
func (h *Heartbeater) Run(ctx context.Context) {
	ticker := time.NewTicker(h.interval)
	defer ticker.Stop()
	for {
		before := h.interval
		h.beat(ctx)
		if h.interval != before {
			ticker.Reset(h.interval)
		}
		if h.interval > before && ctx.Err() == nil {
			continue // at most once per raise: the interval only grows, up to a minute
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-h.cmds.Changed():
		}
	}
}

// Farewell sends one last heartbeat, after Run returned, that promises no self-fence
// (SelfFenceWithinMillis 0), within timeout, and says whether the controller accepted it: an
// agent that stops gracefully withdraws its promise before it disarms its watchdog, so that the
// controller's SelfFence method no longer relies on a node whose agent is gone. A farewell not
// accepted leaves the promise standing, and the agent then keeps its watchdog armed.
func (h *Heartbeater) Farewell(timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := h.client.Exchange(ctx, h.report(h.cmds.Status(), h.kubeletHealthy != nil && *h.kubeletHealthy, 0))
	if err != nil {
		h.log.Info("the controller did not take the farewell heartbeat that withdraws the self-fence promise", "error", err.Error())
		return false
	}
	h.log.Info("farewell heartbeat accepted: the self-fence promise is withdrawn")
	return true
}

// report is the next heartbeat's report, its Seq counted: the node, its peer reports, the
// interval in force, the executor's status and the kubelet's health as given, and the
// self-fence promised (0: none). The executor's read-back is the caller's.
func (h *Heartbeater) report(status *agentwire.ExecutorStatus, healthy bool, selfFence time.Duration) agentwire.Report {
	h.seq++
	peers, probedBy := []agentwire.PeerReport{}, []agentwire.PeerReport(nil)
	if h.peers != nil {
		peers, probedBy = h.peers.Reports(), h.peers.ProbedBy(pathWindow*h.interval)
	}
	return agentwire.Report{
		Node: h.opts.Node, BootID: h.opts.BootID, Seq: h.seq, Instance: h.instance, KubeletHealthy: healthy,
		Peers: peers, ProbedBy: probedBy, IntervalMillis: h.interval.Milliseconds(), SentAt: time.Now(),
		Executor: status, ProbePort: h.opts.ProbePort, ProbeHost: h.opts.ProbeHost, KubeletPort: h.opts.KubeletPort,
		SelfFenceWithinMillis: selfFence.Milliseconds(),
	}
}

func (h *Heartbeater) beat(ctx context.Context) {
	apiReachable := make(chan bool, 1)
	go func() { apiReachable <- h.fence != nil && h.fence.ProbeAPIServer(ctx) }() // alongside the kubelet check
	// The executor's status is read before the kubelet is probed: a report whose order says
	// the agent stopped the kubelet then never carries a probe from before that stop, which
	// the controller would read as a kubelet running again (and watch the workload for the
	// kubelet's longest restart back-off).
	status := h.cmds.Status()
	healthy := h.checkKubelet(ctx)
	sendCtx, cancel := context.WithTimeout(ctx, min(h.opts.CallTimeout, h.interval))
	defer cancel()
	var selfFence time.Duration
	if h.fence != nil {
		selfFence = h.fence.Within()
	}
	if selfFence.Milliseconds() > agentwire.MaxSelfFenceWithinMillis {
		if !h.withinTooLong {
			h.withinTooLong = true
			h.log.Info("WARNING: the self-fence promise exceeds what the controller takes: heartbeats promise no self-fence, and a SelfFence method does not rely on this node (shorten --self-fence-after or the watchdog's timeout)",
				"selfFenceWithin", selfFence.String(), "max", (agentwire.MaxSelfFenceWithinMillis * time.Millisecond).String())
		}
		selfFence = 0 // more than the controller takes (it would refuse every heartbeat): not relied on
	}
	rep := h.report(status, healthy, selfFence)
	rep.RunningContainers = h.cmds.ReadBack(sendCtx)
	resp, err := h.client.Exchange(sendCtx, rep)
	cmd := resp.Command
	if err == nil {
		h.adoptInterval(resp.IntervalMillis)
		if h.peers != nil {
			h.peers.SetTargets(resp.Peers)
		}
	}
	if ctx.Err() != nil {
		return // stopping: the interrupted heartbeat is not news
	}
	h.logSend(err)
	peersReachable := h.peers != nil && h.peers.AnyAcknowledged(pathWindow*h.interval)
	if h.fence != nil {
		h.fence.Observe(ctx, reachability(err == nil, <-apiReachable, healthy, peersReachable), time.Now())
	}
	h.log.V(1).Info("heartbeat", "seq", h.seq, "kubeletHealthy", healthy, "sent", err == nil, "executor", status)
	if cmd != nil {
		h.cmds.Handle(ctx, *cmd)
	}
}

// adoptInterval takes the interval the controller asks for (its policy's), within 100ms..1m.
func (h *Heartbeater) adoptInterval(millis int64) {
	d := time.Duration(millis) * time.Millisecond
	if d <= 0 || d == h.interval {
		return
	}
	if d < 100*time.Millisecond || d > time.Minute {
		h.log.Info("ignoring a heartbeat interval out of range from the controller", "interval", d.String())
		return
	}
	h.log.Info("heartbeat interval set by the controller (the node's FencingPolicy)", "interval", d.String(), "was", h.interval.String())
	h.interval = d
	if h.peers != nil {
		h.peers.SetInterval(d)
	}
}

// checkKubelet GETs the kubelet's healthz with a timeout of half the interval: 200 is healthy.
func (h *Heartbeater) checkKubelet(parent context.Context) bool {
	ctx, cancel := context.WithTimeout(parent, h.interval/2)
	defer cancel()
	healthy, detail := false, ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.opts.KubeletHealthz, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = h.kubelet.Do(req); err == nil {
			healthy, detail = resp.StatusCode == http.StatusOK, resp.Status
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
		}
	}
	if err != nil {
		detail = err.Error()
	}
	if parent.Err() == nil { // stopping: an interrupted check is not news
		h.logKubelet(healthy, detail)
	}
	return healthy
}

func (h *Heartbeater) logKubelet(healthy bool, detail string) {
	if h.kubeletHealthy != nil && *h.kubeletHealthy == healthy {
		return
	}
	h.kubeletHealthy = &healthy
	if healthy {
		h.log.Info("kubelet healthy", "url", h.opts.KubeletHealthz)
	} else {
		h.log.Info("kubelet unhealthy", "url", h.opts.KubeletHealthz, "detail", detail)
	}
}

func (h *Heartbeater) logSend(err error) {
	state := "accepted"
	code, refused := refusal(err)
	switch {
	case refused:
		state = fmt.Sprintf("refused %d", code)
	case err != nil:
		state = "unreachable"
	}
	if state == h.sendState {
		return
	}
	h.sendState = state
	switch state {
	case "accepted":
		h.log.Info("heartbeats accepted by the controller", "seq", h.seq)
	case "unreachable":
		h.log.Error(err, "cannot reach the controller", "seq", h.seq)
	default:
		h.log.Error(err, "controller refuses heartbeats", "seq", h.seq)
	}
}

// refusal says whether err is the controller's refusal (an error with a StatusCode), and its code.
func refusal(err error) (int, bool) {
	var r interface{ StatusCode() int }
	if errors.As(err, &r) {
		return r.StatusCode(), true
	}
	return 0, false
}
