package peers

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
)

// Prober probes the peers the controller assigns (agentwire.Response.Peers), once per interval, each
// with a timeout of half the interval, and keeps the latest result of each for the heartbeats.
// A peer is reachable when its agent answers on its probe port (the first address) with a TLS
// handshake whose certificate names that very node (ProbeDialer), or when a TCP
// connection to its kubelet's port (the other addresses) is accepted; refused, timed out, or
// answered by another node means no path to it. Probing runs apart from the heartbeats, so that
// unreachable peers never delay the node's own life signal.
type Prober struct {
	interval time.Duration
	log      logr.Logger
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	// agentProbe checks a peer's agent at addr; nil: a TCP connection is enough.
	agentProbe func(ctx context.Context, addr, node string) error

	mu      sync.Mutex
	targets []agentwire.PeerTarget
	results map[string]agentwire.PeerReport
	// acked is when each peer's agent last acknowledged a probe (it recorded this agent's
	// visit for the controller).
	acked map[string]time.Time
	wake  chan struct{}
}

// Config is how often to probe.
type Config struct {
	// Interval is the probe interval; each probe's timeout is half of it.
	Interval time.Duration
}

// NewProber probes with agentProbe at a peer's first address (nil: a TCP connection is
// enough) and by TCP at the others.
func NewProber(cfg Config, log logr.Logger, agentProbe func(ctx context.Context, addr, node string) error) *Prober {
	d := &net.Dialer{}
	return &Prober{interval: cfg.Interval, log: log, dial: d.DialContext, agentProbe: agentProbe, results: map[string]agentwire.PeerReport{}, acked: map[string]time.Time{}, wake: make(chan struct{}, 1)}
}

// SetTargets replaces the peers to probe; a changed set is probed at once.
func (p *Prober) SetTargets(targets []agentwire.PeerTarget) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sameTargets(p.targets, targets) {
		return
	}
	p.targets = targets
	keep, acked := make(map[string]agentwire.PeerReport, len(targets)), make(map[string]time.Time, len(targets))
	for _, t := range targets {
		if r, ok := p.results[t.Node]; ok {
			keep[t.Node] = r
		}
		if at, ok := p.acked[t.Node]; ok {
			acked[t.Node] = at
		}
	}
	p.results, p.acked = keep, acked
	p.log.Info("peers to probe", "peers", targetNames(targets))
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// AnyAcknowledged says whether a peer's agent acknowledged a probe younger than within (false
// for nil): a path from this node that the controller sees, through that peer's heartbeats
// (ProbeServer.ProbedBy). A peer reached only at its kubelet's port, or whose agent did not
// acknowledge, is reported reachable to the controller but is no such path: the controller
// never learns that this node reached it.
func (p *Prober) AnyAcknowledged(within time.Duration) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, at := range p.acked {
		if time.Since(at) <= within {
			return true
		}
	}
	return false
}

// Reports are the latest results, at most agentwire.MaxPeers.
func (p *Prober) Reports() []agentwire.PeerReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]agentwire.PeerReport, 0, len(p.results))
	for _, t := range p.targets {
		if r, ok := p.results[t.Node]; ok && len(out) < agentwire.MaxPeers {
			out = append(out, r)
		}
	}
	return out
}

// SetInterval changes the probe interval (and timeout) from the next round on.
func (p *Prober) SetInterval(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.interval = d
}

func (p *Prober) currentInterval() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.interval
}

// Run probes every interval until ctx is done.
func (p *Prober) Run(ctx context.Context) {
	interval := p.currentInterval()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.wake:
		}
		if d := p.currentInterval(); d != interval {
			interval = d
			t.Reset(d)
		}
		p.probeAll(ctx)
	}
}

func (p *Prober) probeAll(ctx context.Context) {
	p.mu.Lock()
	targets := p.targets
	p.mu.Unlock()
	var wg sync.WaitGroup
	results, acked := make([]agentwire.PeerReport, len(targets)), make([]time.Time, len(targets))
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var reachable bool
			reachable, acked[i] = p.probe(ctx, t)
			results[i] = agentwire.PeerReport{Node: t.Node, Reachable: reachable, At: time.Now()}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range results {
		prev, had := p.results[r.Node]
		if !had || prev.Reachable != r.Reachable {
			p.log.Info("peer reachability", "peer", r.Node, "reachable", r.Reachable, "agentAcknowledged", !acked[i].IsZero())
		}
		if sameTargetSet(p.targets, r.Node) {
			p.results[r.Node] = r
			if !acked[i].IsZero() {
				p.acked[r.Node] = acked[i]
			}
		}
	}
}

// probe tries every address of t at once and reports whether any answered, and when the peer's
// agent acknowledged (its address is the first, probed with agentProbe; zero: it did not). The
// moment is the acknowledgement's own, not the end of the round: the path counts for a while
// after it, and the peer reports the probe from then.
func (p *Prober) probe(parent context.Context, t agentwire.PeerTarget) (reachable bool, acked time.Time) {
	ctx, cancel := context.WithTimeout(parent, p.currentInterval()/2)
	defer cancel()
	type answer struct {
		ok    bool
		agent time.Time
	}
	answers := make(chan answer, len(t.Addresses))
	for i, a := range t.Addresses {
		go func() {
			if i == 0 && p.agentProbe != nil {
				sent := time.Now()
				err := p.agentProbe(ctx, a, t.Node)
				var at time.Time
				if err == nil {
					// The peer recorded the probe between sending it and reading the answer: the
					// earlier bound, so that this agent never counts the path longer than the peer
					// reports it.
					at = sent
				}
				answers <- answer{ok: err == nil || errors.Is(err, ErrNotAcknowledged), agent: at}
				return
			}
			conn, err := p.dial(ctx, "tcp", a)
			if err == nil {
				_ = conn.Close()
			}
			answers <- answer{ok: err == nil}
		}()
	}
	// Every answer is awaited (each ends by the timeout): the agent's acknowledgement may come
	// after the kubelet's port answered.
	for range t.Addresses {
		a := <-answers
		reachable = reachable || a.ok
		if a.agent.After(acked) {
			acked = a.agent
		}
	}
	return reachable, acked
}

func sameTargetSet(targets []agentwire.PeerTarget, node string) bool {
	for _, t := range targets {
		if t.Node == node {
			return true
		}
	}
	return false
}

func sameTargets(a, b []agentwire.PeerTarget) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Node != b[i].Node || len(a[i].Addresses) != len(b[i].Addresses) {
			return false
		}
		for j := range a[i].Addresses {
			if a[i].Addresses[j] != b[i].Addresses[j] {
				return false
			}
		}
	}
	return true
}

func targetNames(ts []agentwire.PeerTarget) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Node
	}
	return out
}

// Peers is a node's two sides of peer probing, as its heartbeats need them: the probes it makes
// (Prober) and the probes it answers (ProbeServer).
type Peers struct {
	*Prober
	*ProbeServer
}
