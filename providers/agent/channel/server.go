package channel

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	stdlog "log"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/pki"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"
	"k8s.io/klog/v2"
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Addr is the address to listen on, such as ":9443" or "127.0.0.1:0".
	Addr string
	// CertFile and KeyFile hold the server's certificate; they are re-read on change.
	CertFile, KeyFile string
	// CAFile holds the CA bundle agents' certificates must chain to; it is re-read on change.
	CAFile string
	// Logger defaults to a discarding logger.
	Logger logr.Logger
	// OnHeartbeat, when set, is called with every accepted heartbeat; it must not block.
	OnHeartbeat func(agentwire.Heartbeat)
	// Now defaults to time.Now.
	Now func() time.Time
	// ProbePeers is how many peers every agent probes (see classify.Ring); 0 means
	// classify.DefaultProbePeers, a negative number turns peer probing off.
	ProbePeers int
	// IntervalFor, when set, gives the heartbeat interval a node's agent is to use (0: its
	// own), sent in every answer. It is called for every heartbeat and must be quick.
	IntervalFor func(node string) time.Duration
	// MayCommand, when set, is asked before a node's pending command is handed to its agent in
	// the answer to a heartbeat; an error withholds it (the agent gets it at a later heartbeat,
	// if the command is still pending then). The controller sets its leader check: a replica
	// that stood still past its lease, or lost the API server, hands out no order it set
	// while it led: the new leader gives the orders now. It is called only when a command is
	// pending, with a context bounded by mayCommandTimeout.
	MayCommand func(ctx context.Context) error
	// MaxConns bounds the connections open at once; more wait in the kernel's accept queue.
	// 0 means the process's open-file limit less ReservedFiles: agents reconnecting faster
	// than their old connections close (a controller slowed down), or anyone opening
	// connections to the port, must never take the files the controller needs to reach its
	// API server, without which it is blind.
	MaxConns int
	// MaxHandshakes bounds the TLS handshakes in progress at once; more connections wait,
	// without a goroutine each, for one to end (why: handshakeListener). 0 means
	// DefaultMaxHandshakes.
	MaxHandshakes int
	// NoDatagrams turns heartbeat datagrams off (agentwire's "Heartbeat datagrams"): every
	// heartbeat then comes over HTTPS, on a connection each agent keeps open.
	NoDatagrams bool
	// handshakeTimeout, when set, replaces the server's ReadHeaderTimeout as the bound on a
	// TLS handshake and on its wait for a worker, for tests.
	handshakeTimeout time.Duration
	// helloTimeout, when set, replaces helloTimeout (the const), for tests.
	helloTimeout time.Duration
}

// helloTimeout bounds a handshake worker's wait for a connection's ClientHello (see
// handshakeListener). An agent sends it as it connects: a second covers a slow network.
const helloTimeout = time.Second

// DefaultMaxHandshakes is MaxHandshakes's default. A handshake is not all CPU: its worker also
// waits a round trip for the agent's certificate, which the agent signs meanwhile. With twice
// GOMAXPROCS (4) workers, make bench-scale's 5000 simulated agents reconnecting at once left
// the workers mostly waiting: 628 handshakes ended in EOF over 10 s, agents that had given up
// after their 5 s handshake timeout (palisade-agent's is its heartbeat interval, 1 s by
// default). 64 handshakes in progress hold about 200 KiB (about 3 KiB each, from the heap
// profile of 5000 at once).
const DefaultMaxHandshakes = 64

// ReservedFiles are the open files a default MaxConns leaves to the rest of the process (API
// server connections and watches, metrics and probes).
const ReservedFiles = 1024

// defaultMaxConns is the open-file limit less ReservedFiles, and at least half of it.
func defaultMaxConns() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > math.MaxInt32 {
		return math.MaxInt32
	}
	limit := int(r.Cur)
	return max(limit-ReservedFiles, limit/2)
}

// Server receives the direct heartbeats of node agents over mutually authenticated TLS,
// independent of the API server, and remembers the latest one of each node.
type Server struct {
	opts ServerOptions
	log  logr.Logger
	// noisy writes the lines that come per connection, request or datagram (lineLimit).
	noisy *lineLimit
	srv   *http.Server
	lis   net.Listener
	mu    sync.RWMutex
	nodes map[string]agentwire.Heartbeat
	// commands are the pending commands by node; statuses the latest executor status by node.
	commands map[string]agentwire.Command
	statuses map[string]agentwire.ExecutorStatus
	// about indexes the latest heartbeats' reports about other nodes (Heartbeat.Sightings) by
	// the node they are about, then by reporting node, so that Latest reads one node's in O(peers).
	about map[string]map[string][]agentwire.Sighting
	// reached is, by node, the latest moment a peer's agent reported acknowledging the node's
	// probe, on the server's clock, from any heartbeat since (not only the latest ones, which
	// drop an acknowledgement after two of the peer's intervals): LastReached.
	reached map[string]time.Time
	// clocks place each node's heartbeats on the server's clock by when they were sent.
	clocks map[string]sendClock
	peers  *peerBook
	// dg is the heartbeat datagrams' socket and keys (its conn nil with NoDatagrams).
	dg *datagramState
	// handshaking counts the TLS handshakes in progress (at most MaxHandshakes).
	handshaking atomic.Int64
}

// NewServer loads the certificate files (failing early when they are unusable) and builds the
// server; Listen or Start opens the port.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = defaultMaxConns()
	}
	if opts.MaxHandshakes <= 0 {
		opts.MaxHandshakes = DefaultMaxHandshakes
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	s := &Server{
		opts: opts, log: opts.Logger, nodes: map[string]agentwire.Heartbeat{}, clocks: map[string]sendClock{},
		commands: map[string]agentwire.Command{}, statuses: map[string]agentwire.ExecutorStatus{},
		about: map[string]map[string][]agentwire.Sighting{}, peers: newPeerBook(opts.ProbePeers),
		dg: newDatagramState(), noisy: newLineLimit(opts.Logger, linesPerSecond),
	}
	cert, err := pki.KeyPairSource(opts.CertFile, opts.KeyFile, s.log)
	if err != nil {
		return nil, fmt.Errorf("loading the server certificate: %w", err)
	}
	pool, err := pki.CAPoolSource(opts.CAFile, s.log)
	if err != nil {
		return nil, fmt.Errorf("loading the agent CA: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(agentwire.HeartbeatPath, s.handleHeartbeat)
	s.srv = &http.Server{
		Handler: mux,
		// Mutual TLS 1.3 (the gateway's accepts 1.2), the files re-read for every handshake so
		// that a rotated server certificate or CA bundle applies to every new connection.
		TLSConfig:         pki.ServerTLSConfig(tls.VersionTLS13, cert, pool),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          stdlog.New(logWriter{log: s.log, noisy: s.noisy}, "", 0),
		// HTTP/1.1 with keep-alive: every agent keeps one connection open and sends one request
		// at a time on it, so HTTP/2's streams buy nothing, and its framing costs a second
		// goroutine per connection, a goroutine and several frames per heartbeat, and HPACK
		// state. At 5000 nodes that was most of the controller's CPU and memory (make
		// bench-scale's profiles).
		Protocols: http1Only(),
	}
	return s, nil
}

func http1Only() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	return p
}

// Listen opens the port; Start calls it when it has not been called.
func (s *Server) Listen() error {
	if s.lis != nil {
		return nil
	}
	lis, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("listening for heartbeats on %s: %w", s.opts.Addr, err)
	}
	s.lis = netutil.LimitListener(lis, s.opts.MaxConns)
	if s.opts.NoDatagrams {
		return nil
	}
	if err := s.listenDatagrams(); err != nil {
		_ = s.lis.Close()
		s.lis = nil
		return err
	}
	return nil
}

// Addr is the address listened on, once Listen has returned.
func (s *Server) Addr() string {
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// Start serves until ctx is done, then shuts down gracefully (a controller-runtime Runnable).
func (s *Server) Start(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.log.Info("serving agent heartbeats", "address", s.Addr(), "datagrams", s.dg.conn != nil)
	if s.dg.conn != nil {
		for range datagramReaders {
			go s.serveDatagrams()
		}
		defer s.dg.conn.Close()
	}
	errc := make(chan error, 1)
	lis := s.handshakeListener()
	go func() { errc <- s.srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving heartbeats: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down the heartbeat server: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving heartbeats: %w", err)
	}
	return nil
}

// handshakeListener wraps the port's listener in one that completes at most MaxHandshakes TLS
// handshakes at once, for http.Server.Serve. Serve takes the handshaken *tls.Conns as they are:
// its conn.serve calls HandshakeContext, a no-op on a conn whose handshake is complete (crypto/tls
// returns at once), and keeps its ConnectionState for Request.TLS, which clientCert reads (see
// (*conn).serve in net/http/server.go). Shutdown closes the listener, and so every connection
// still waiting for or in its handshake.
func (s *Server) handshakeListener() *handshakeListener {
	// A clone of the server's config: its GetConfigForClient, which re-reads the certificate
	// files for every handshake, is kept. ServeTLS added "http/1.1" to a clone's NextProtos,
	// Serve does not: the server speaks HTTP/1.1 only (http1Only).
	config := s.srv.TLSConfig.Clone()
	config.NextProtos = []string{"http/1.1"}
	// The server's ReadHeaderTimeout, which http.Server put on handshakes too.
	timeout := cmp.Or(s.opts.handshakeTimeout, s.srv.ReadHeaderTimeout)
	hello := cmp.Or(s.opts.helloTimeout, helloTimeout)
	return newHandshakeListener(s.lis, config, s.opts.MaxHandshakes, timeout, hello, s.srv.ErrorLog, &s.handshaking)
}

// Snapshot returns a copy of the latest heartbeat of every node.
func (s *Server) Snapshot() map[string]agentwire.Heartbeat {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]agentwire.Heartbeat, len(s.nodes))
	for n, hb := range s.nodes {
		out[n] = hb
	}
	return out
}

// EachReceived calls fn with every node's latest heartbeat's arrival time and interval, under
// the read lock and without copying: fn must be quick and must not call the server.
func (s *Server) EachReceived(fn func(node string, received time.Time, interval time.Duration)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for n, hb := range s.nodes {
		fn(n, hb.Received, hb.Interval)
	}
}

// Latest returns node's latest heartbeat (ok false when there is none) and the reports about
// node in every other node's latest heartbeat, without copying the others: what
// agentwire.LatestOf computes from a Snapshot, in O(peers).
func (s *Server) Latest(node string) (hb agentwire.Heartbeat, about []agentwire.Sighting, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	hb, ok = s.nodes[node]
	for _, reports := range s.about[node] {
		about = append(about, reports...)
	}
	return hb, about, ok
}

// LastReached is the latest moment a peer's agent reported acknowledging node's probe (its
// ProbedBy), on the server's clock, over every heartbeat the server accepted (Forget drops
// those older than an hour); zero for none. The node's agent counts such a probe as a path for a while
// after it, so the SelfFence method must not miss one however briefly the peer reported it.
func (s *Server) LastReached(node string) time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.reached[node]
}

// reindex replaces the reports about other nodes of old (the reporting node's previous
// heartbeat, zero for none) by those of hb in the index by the node they are about; s.mu must
// be held for writing.
func (s *Server) reindex(old, hb agentwire.Heartbeat) {
	old.Sightings(func(about string, _ agentwire.Sighting) {
		if m := s.about[about]; m != nil {
			delete(m, old.Node)
			if len(m) == 0 {
				delete(s.about, about)
			}
		}
	})
	s.reachedBy(hb)
	hb.Sightings(func(about string, sg agentwire.Sighting) {
		m := s.about[about]
		if m == nil {
			m = map[string][]agentwire.Sighting{}
			s.about[about] = m
		}
		m[hb.Node] = append(m[hb.Node], sg)
	})
}

// reachedBy keeps, in LastReached, the latest acknowledged probe of each node that hb reports.
func (s *Server) reachedBy(hb agentwire.Heartbeat) {
	hb.Sightings(func(about string, sg agentwire.Sighting) {
		if sg.Inbound && sg.At.After(s.reached[about]) {
			if s.reached == nil {
				s.reached = map[string]time.Time{}
			}
			s.reached[about] = sg.At
		}
	})
}

// Forget drops a node's heartbeat, its pending command and its executor status, for a node
// deleted from the cluster.
func (s *Server) Forget(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reindex(s.nodes[node], agentwire.Heartbeat{})
	delete(s.nodes, node)
	delete(s.clocks, node)
	// The node's own acknowledgements go only once old: a peer's heartbeat from before the
	// Forget may still name it (the index by target keeps those too), and a node of the same
	// name may come back. Older than an hour, none can matter to a fence any more.
	if s.opts.Now != nil {
		for n, at := range s.reached {
			if s.opts.Now().Sub(at) > time.Hour {
				delete(s.reached, n)
			}
		}
	}
	delete(s.commands, node)
	delete(s.statuses, node)
	s.forgetKey(node)
	delete(s.dg.told, node)
	s.peers.forget(node)
}

// SetCommand makes cmd the node's pending command, replacing any other: it is sent in the
// response to every heartbeat of that node (and of no other) until ClearCommand. The agent
// carries out each command ID once.
func (s *Server) SetCommand(node string, cmd agentwire.Command) {
	if cmd.GracePeriodSeconds != nil {
		g := *cmd.GracePeriodSeconds
		cmd.GracePeriodSeconds = &g // not shared with the caller
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commands[node] = cmd
}

// ClearCommand stops sending the node's pending command if its ID is id, or whatever it is
// when id is "" (a NodeFence deleted, whose UID is no longer known); the controller calls it
// (through the agent provider's End) when the order's fence, or its method, ends. Another
// order set since (a later method's, a newer fence's) stays: an End that comes late takes back
// its own order only.
func (s *Server) ClearCommand(node, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cmd, ok := s.commands[node]; ok && (id == "" || cmd.ID == id) {
		delete(s.commands, node)
	}
}

// ExecutorStatus is the latest executor status the node's agent reported, kept across
// heartbeats that carry none (an agent restarted since); false when it never reported one.
func (s *Server) ExecutorStatus(node string) (agentwire.ExecutorStatus, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.statuses[node]
	return st, ok
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	now := s.opts.Now()
	cert := clientCert(r)
	if cert == nil || cert.Subject.CommonName == "" {
		http.Error(w, "no verified client certificate naming a node", http.StatusUnauthorized)
		return
	}
	if now.After(cert.NotAfter) {
		// The certificate expired during this long-lived connection: make the agent reconnect,
		// so that its next handshake presents its renewed certificate.
		w.Header().Set("Connection", "close")
		http.Error(w, "client certificate expired", http.StatusUnauthorized)
		return
	}
	var rep agentwire.Report
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, agentwire.MaxBodyBytes)).Decode(&rep); err != nil {
		http.Error(w, "reading heartbeat: "+err.Error(), http.StatusBadRequest)
		return
	}
	node := cert.Subject.CommonName
	if rep.Node != node {
		s.noisy.Info("rejected heartbeat naming another node", "Node", klog.KRef("", node), "bodyNode", rep.Node, "remote", r.RemoteAddr)
		http.Error(w, fmt.Sprintf("certificate is for node %q, heartbeat names %q", node, rep.Node), http.StatusForbidden)
		return
	}
	if err := validate(rep); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd, pending := s.accept(rep, node, now, cert.NotAfter, r.RemoteAddr)
	resp := s.answer(node, rep.IntervalMillis)
	if pending && s.mayCommand(r.Context(), node, cmd) {
		resp.Command = &cmd
	}
	if s.dg.conn != nil {
		if err := s.answeredOverHTTPS(rep, node, cert.NotAfter, &resp); err != nil {
			s.log.Error(err, "making a heartbeat datagram key failed", "Node", klog.KRef("", node))
		}
	}
	if resp.Command == nil && len(resp.Peers) == 0 && resp.IntervalMillis == 0 && resp.Datagram == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(resp); err != nil {
		s.noisy.Info("answering a heartbeat failed", "Node", klog.KRef("", node), "error", err.Error())
	}
}

// mayCommandTimeout bounds ServerOptions.MayCommand: the heartbeat waits for it.
const mayCommandTimeout = 2 * time.Second

// mayCommand says whether node's pending command cmd may be handed out now
// (ServerOptions.MayCommand), logging a refusal.
func (s *Server) mayCommand(ctx context.Context, node string, cmd agentwire.Command) bool {
	if s.opts.MayCommand == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, mayCommandTimeout)
	defer cancel()
	if err := s.opts.MayCommand(ctx); err != nil {
		s.noisy.Info("withheld a pending command from the node's agent", "Node", klog.KRef("", node), "command", cmd.ID, "error", err.Error())
		return false
	}
	return true
}

// accept records the validated heartbeat rep of node, received at now from remote with a
// client certificate (or a datagram key) valid until notAfter, and returns the node's pending
// command, if any.
func (s *Server) accept(rep agentwire.Report, node string, now, notAfter time.Time, remote string) (agentwire.Command, bool) {
	if rep.Executor != nil {
		if err := rep.Executor.Validate(); err != nil {
			// The heartbeat still says the node is alive: keep it, without the status.
			s.noisy.Info("ignored an invalid executor status", "Node", klog.KRef("", node), "error", err.Error())
			rep.Executor = nil
		}
	}
	hb := toHeartbeat(rep, now, notAfter)
	hb.ProbeAddresses = probeAddresses(rep, remote)
	cmd, pending, taken := s.record(hb)
	if taken { // an overtaken heartbeat's addresses are as old as the rest of it
		s.peers.update(node, hb.ProbeAddresses)
	}
	return cmd, pending
}

// answer is what node's agent, which heartbeats at intervalMillis, is told besides a command:
// the peers to probe, and the interval its policy asks for when it is another one (compared in
// the milliseconds the wire carries).
func (s *Server) answer(node string, intervalMillis int64) agentwire.Response {
	resp := agentwire.Response{Peers: s.peers.targets(node)}
	if s.opts.IntervalFor != nil {
		if d := s.opts.IntervalFor(node).Milliseconds(); d > 0 && d != intervalMillis {
			resp.IntervalMillis = d
		}
	}
	return resp
}

func clientCert(r *http.Request) *x509.Certificate {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return nil
	}
	return r.TLS.VerifiedChains[0][0]
}

func validate(rep agentwire.Report) error {
	if len(rep.BootID) > agentwire.MaxBootID {
		return fmt.Errorf("boot ID of %d bytes, at most %d", len(rep.BootID), agentwire.MaxBootID)
	}
	if len(rep.Instance) > agentwire.MaxInstance {
		return fmt.Errorf("instance of %d bytes, at most %d", len(rep.Instance), agentwire.MaxInstance)
	}
	if len(rep.Peers) > agentwire.MaxPeers {
		return fmt.Errorf("%d peer reports, at most %d", len(rep.Peers), agentwire.MaxPeers)
	}
	if len(rep.ProbedBy) > agentwire.MaxPeers {
		return fmt.Errorf("%d probing peers, at most %d", len(rep.ProbedBy), agentwire.MaxPeers)
	}
	for _, p := range slices.Concat(rep.Peers, rep.ProbedBy) {
		if p.Node == "" || p.At.IsZero() {
			return errors.New("a peer report without node or time")
		}
	}
	if len(rep.DatagramKeyID) > agentwire.DatagramKeyIDBytes {
		return fmt.Errorf("datagram key ID of %d bytes, at most %d", len(rep.DatagramKeyID), agentwire.DatagramKeyIDBytes)
	}
	if rep.IntervalMillis < 0 || rep.IntervalMillis > agentwire.MaxIntervalMillis {
		return fmt.Errorf("heartbeat interval %dms outside 0..%dms", rep.IntervalMillis, agentwire.MaxIntervalMillis)
	}
	if rep.SelfFenceWithinMillis < 0 || rep.SelfFenceWithinMillis > agentwire.MaxSelfFenceWithinMillis {
		return fmt.Errorf("self-fence time %dms outside 0..%dms", rep.SelfFenceWithinMillis, agentwire.MaxSelfFenceWithinMillis)
	}
	if rep.RunningContainers != nil && *rep.RunningContainers < 0 {
		return errors.New("negative running containers")
	}
	if rep.ProbePort < 0 || rep.ProbePort > 65535 || rep.KubeletPort < 0 || rep.KubeletPort > 65535 {
		return errors.New("probe or kubelet port out of range")
	}
	if rep.ProbeHost != "" && net.ParseIP(rep.ProbeHost) == nil {
		return fmt.Errorf("probe host %q is not an IP address", rep.ProbeHost)
	}
	return nil
}

// toHeartbeat records rep as received at now, moving peer times onto the server's clock.
func toHeartbeat(rep agentwire.Report, now, notAfter time.Time) agentwire.Heartbeat {
	hb := agentwire.Heartbeat{
		Node: rep.Node, BootID: rep.BootID, Seq: rep.Seq, Instance: rep.Instance, KubeletHealthy: rep.KubeletHealthy,
		Interval: time.Duration(rep.IntervalMillis) * time.Millisecond, Received: now, SentAt: rep.SentAt, CertNotAfter: notAfter,
		Executor: rep.Executor, RunningContainers: rep.RunningContainers,
		SelfFenceWithin: time.Duration(rep.SelfFenceWithinMillis) * time.Millisecond,
	}
	var skew time.Duration
	if !rep.SentAt.IsZero() {
		skew = now.Sub(rep.SentAt)
	}
	onServerClock := func(reports []agentwire.PeerReport) []agentwire.PeerReport {
		out := make([]agentwire.PeerReport, len(reports))
		for i, p := range reports {
			p.At = p.At.Add(skew)
			if p.At.After(now) {
				p.At = now
			}
			out[i] = p
		}
		return out
	}
	hb.Peers = onServerClock(rep.Peers)
	if len(rep.ProbedBy) > 0 {
		hb.ProbedBy = onServerClock(rep.ProbedBy)
	}
	return hb
}

// unreachedWhenSent moves hb's reports of peers it could not reach back by the time hb was held
// on the way (Received minus Sent): toHeartbeat moved them onto the server's clock by arrival,
// which makes a heartbeat the network held back for seconds report old failures as fresh, and
// a failed probe is evidence toward fencing the peer. A peer reached stays placed by arrival:
// a sign of life is never taken as older than it may be.
func unreachedWhenSent(hb *agentwire.Heartbeat) {
	held := hb.Received.Sub(hb.Sent)
	if hb.Sent.IsZero() || held <= 0 {
		return
	}
	for i := range hb.Peers {
		if !hb.Peers[i].Reachable {
			hb.Peers[i].At = hb.Peers[i].At.Add(-held)
		}
	}
}

// overtaken says whether hb was sent before prev, the node's heartbeat recorded already: the
// same agent process (its boot and Instance) numbered it lower, so the network delayed it. An
// HTTPS heartbeat sent during a partition (its request in the TCP send buffer when the agent gave
// up on it) is retransmitted after the heal and can arrive seconds after heartbeats the agent
// sent since, on a new connection or as datagrams. Taken, it would show the node as it was
// before: its kubelet healthy before the agent stopped it for an order it had not received yet,
// which made the Executor's window its longest (likely chaos seed 56), its peers' reports moved
// onto the server's clock as fresh, and a heartbeat sent before a fence's confirmation as life
// after it. It is not taken at all: the agent's later heartbeats already arrived.
//
// Only while prev is recent (a minute, or three of its intervals if longer): after that a
// lower Seq of the same process is taken (a machine restored from a memory snapshot numbers
// again from where the snapshot was, and is alive). A restarted agent has another Instance; an agent
// that names none (before Instance) is never overtaken.
func overtaken(prev, hb agentwire.Heartbeat) bool {
	every := prev.Interval
	if every <= 0 {
		every = time.Second // the agent's default
	}
	return hb.Instance != "" && hb.Instance == prev.Instance && hb.BootID == prev.BootID && hb.Seq < prev.Seq &&
		hb.Received.Sub(prev.Received) < max(overtakenIntervals*every, overtakenFor)
}

// overtaken's bound: a lower Seq of one process is taken again once the recorded heartbeat is
// this many of its intervals old, and at least overtakenFor. The longer it is, the later a
// heartbeat delayed in the network can arrive and still be recognised (TCP retransmits a
// request for minutes); the shorter, the sooner a machine restored from a snapshot is heard
// (its Lease renewals and its peers show it alive meanwhile).
const (
	overtakenIntervals = 3
	overtakenFor       = time.Minute
)

// record keeps hb (and its executor status) and returns the node's pending command, if any.
func (s *Server) record(hb agentwire.Heartbeat) (cmd agentwire.Command, pending, taken bool) {
	s.mu.Lock()
	prev, seen := s.nodes[hb.Node]
	if seen && overtaken(prev, hb) {
		s.reachedBy(hb) // its peers' acknowledgements are kept as any heartbeat's: LastReached must miss none
		cmd, pending := s.commands[hb.Node]
		s.mu.Unlock()
		s.log.V(1).Info("ignored a heartbeat sent before the one recorded (delayed in the network)", "Node", klog.KRef("", hb.Node),
			"seq", hb.Seq, "recordedSeq", prev.Seq)
		return cmd, pending, false
	}
	clk := s.clocks[hb.Node]
	hb.Sent = clk.sent(hb)
	s.clocks[hb.Node] = clk
	unreachedWhenSent(&hb)
	s.nodes[hb.Node] = hb
	s.reindex(prev, hb)
	prevStatus, hadStatus := s.statuses[hb.Node]
	if hb.Executor != nil {
		s.statuses[hb.Node] = *hb.Executor
	}
	cmd, pending = s.commands[hb.Node]
	s.mu.Unlock()
	switch {
	case !seen:
		s.log.Info("first heartbeat from node", "Node", klog.KRef("", hb.Node), "bootID", hb.BootID)
	case prev.BootID != hb.BootID:
		s.log.Info("node rebooted", "Node", klog.KRef("", hb.Node), "previousBootID", prev.BootID, "bootID", hb.BootID)
	}
	if st := hb.Executor; st != nil && (!hadStatus || prevStatus.ID != st.ID || prevStatus.State != st.State) {
		s.log.Info("executor status", "Node", klog.KRef("", hb.Node), "command", st.ID, "state", st.State,
			"message", st.Message, "pods", st.Pods, "containers", st.Containers)
	}
	if s.opts.OnHeartbeat != nil {
		s.opts.OnHeartbeat(hb)
	}
	return cmd, pending, true
}

// logWriter sends the http.Server's own errors to the logger: the failed TLS handshakes, which
// a storm of reconnecting agents makes by the thousand, through the line limit, and the rest
// (a handler's panic, an accept error) as they come.
type logWriter struct {
	log   logr.Logger
	noisy *lineLimit
}

func (w logWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		w.noisy.Info("heartbeat server", "message", msg)
	} else {
		w.log.Info("heartbeat server", "message", msg)
	}
	return len(p), nil
}
