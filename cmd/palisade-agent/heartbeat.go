package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/channel"
)

// heartbeater checks the kubelet and sends one heartbeat per interval. It logs changes (kubelet
// health, the controller refusing or becoming unreachable, and recovery), not every beat.
type heartbeater struct {
	opts    options
	client  *channel.Client
	kubelet *http.Client
	bootID  string
	log     logr.Logger
	cmds    *commander
	fence   *selfFencer // nil: no self-fencing
	peers   *prober     // nil: no peer probing
	// probePort is the port this node accepts its peers' probes on, 0 for none.
	probePort int

	// interval is the heartbeat interval in force: --interval until the controller answers
	// with its policy's.
	interval       time.Duration
	seq            uint64
	kubeletHealthy *bool  // nil until the first check
	sendState      string // of the last heartbeat: "" before the first, "accepted", "refused <code>", "unreachable"
}

func newHeartbeater(o options, c *channel.Client, cmds *commander, bootID string, log logr.Logger) *heartbeater {
	// The kubelet's healthz is plain HTTP on loopback: never through a proxy.
	tr := &http.Transport{Proxy: nil, MaxIdleConns: 1, IdleConnTimeout: 4 * o.interval}
	return &heartbeater{opts: o, client: c, kubelet: &http.Client{Transport: tr}, bootID: bootID, log: log, cmds: cmds, interval: o.interval}
}

// run beats at once, then every interval until ctx is done, and at once when the executor's
// status changes. A beat that runs late (a slow kubelet or controller) delays the next tick
// instead of piling up beats.
func (h *heartbeater) run(ctx context.Context) {
	ticker := time.NewTicker(h.interval)
	defer ticker.Stop()
	for {
		before := h.interval
		h.beat(ctx)
		if h.interval != before {
			ticker.Reset(h.interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-h.cmds.changed:
		}
	}
}

func (h *heartbeater) beat(ctx context.Context) {
	apiReachable := make(chan bool, 1)
	go func() { apiReachable <- h.fence.probeAPIServer(ctx) }() // alongside the kubelet check
	healthy := h.checkKubelet(ctx)
	h.seq++
	sendCtx, cancel := context.WithTimeout(ctx, min(h.opts.controllerCallTimeout, h.interval))
	defer cancel()
	status := h.cmds.status()
	peers := []agentwire.PeerReport{}
	if h.peers != nil {
		peers = h.peers.reports()
	}
	resp, err := h.client.Exchange(sendCtx, agentwire.Report{
		Node: h.opts.nodeName, BootID: h.bootID, Seq: h.seq, KubeletHealthy: healthy,
		Peers: peers, IntervalMillis: h.interval.Milliseconds(), SentAt: time.Now(),
		Executor: status, RunningContainers: h.cmds.readBack(sendCtx),
		ProbePort: h.probePort, ProbeHost: h.opts.probeHost, KubeletPort: h.opts.kubeletPort,
	})
	cmd := resp.Command
	if err == nil {
		h.adoptInterval(resp.IntervalMillis)
		if h.peers != nil {
			h.peers.setTargets(resp.Peers)
		}
	}
	if ctx.Err() != nil {
		return // stopping: the interrupted heartbeat is not news
	}
	h.logSend(err)
	var rejected *channel.RejectedError
	h.fence.observe(ctx, reachability{controller: err == nil || errors.As(err, &rejected), api: <-apiReachable, peers: h.peers.anyReachable(2 * h.interval)}, time.Now())
	h.log.V(1).Info("heartbeat", "seq", h.seq, "kubeletHealthy", healthy, "sent", err == nil, "executor", status)
	if cmd != nil {
		h.cmds.handle(ctx, *cmd)
	}
}

// adoptInterval takes the interval the controller asks for (its policy's), within 100ms..1m.
func (h *heartbeater) adoptInterval(millis int64) {
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
		h.peers.setInterval(d)
	}
}

// checkKubelet GETs the kubelet's healthz with a timeout of half the interval: 200 is healthy.
func (h *heartbeater) checkKubelet(parent context.Context) bool {
	ctx, cancel := context.WithTimeout(parent, h.interval/2)
	defer cancel()
	healthy, detail := false, ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.opts.kubeletHealthz, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = h.kubelet.Do(req); err == nil {
			healthy, detail = resp.StatusCode == http.StatusOK, resp.Status
			discard(resp.Body)
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

func (h *heartbeater) logKubelet(healthy bool, detail string) {
	if h.kubeletHealthy != nil && *h.kubeletHealthy == healthy {
		return
	}
	h.kubeletHealthy = &healthy
	if healthy {
		h.log.Info("kubelet healthy", "url", h.opts.kubeletHealthz)
	} else {
		h.log.Info("kubelet unhealthy", "url", h.opts.kubeletHealthz, "detail", detail)
	}
}

func (h *heartbeater) logSend(err error) {
	state := "accepted"
	var rejected *channel.RejectedError
	switch {
	case errors.As(err, &rejected):
		state = fmt.Sprintf("refused %d", rejected.Code)
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
