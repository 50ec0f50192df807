package agentwire

import (
	"time"
)

// HeartbeatPath is the endpoint agents POST their Report to.
const HeartbeatPath = "/v1/heartbeat"

// MaxPeers bounds the peer reports one heartbeat may carry.
const MaxPeers = 64

// MaxIntervalMillis bounds the heartbeat interval an agent may state (a FencingPolicy's
// detection.heartbeatInterval goes up to 1m): the controller waits a few intervals before it
// counts an agent lost, so an agent stating a longer one would keep a dead node looking alive.
const MaxIntervalMillis = 60_000

// MaxBodyBytes bounds a heartbeat body and its answer: MaxPeers reports fit many times over.
const MaxBodyBytes = 64 << 10

// MaxInstance bounds a Report's Instance.
const MaxInstance = 64

// Report is the JSON body of one heartbeat, as the agent sends it.
type Report struct {
	// Node must be the CommonName of the agent's client certificate.
	Node string `json:"node"`
	// BootID is the node's /proc/sys/kernel/random/boot_id: a new one means the node rebooted.
	BootID string `json:"bootID"`
	// Seq counts the heartbeats of this agent process, from 1.
	Seq uint64 `json:"seq"`
	// Instance names this agent process (random, drawn at its start; at most MaxInstance
	// bytes): Seq orders the heartbeats of one Instance. Empty from agents before it.
	Instance string `json:"instance,omitempty"`
	// KubeletHealthy is the agent's view of its kubelet (its healthz endpoint).
	KubeletHealthy bool `json:"kubeletHealthy"`
	// Peers are the agent's latest probes of its peers.
	Peers []PeerReport `json:"peers"`
	// ProbedBy are the peers whose probes of this node its agent acknowledged lately, each
	// with the time of its latest (Reachable true): the controller's only sight of a path from
	// such a peer to this node, which the peer's agent counts as one (at most MaxPeers).
	ProbedBy []PeerReport `json:"probedBy,omitempty"`
	// IntervalMillis is the agent's heartbeat interval; 0 means the classifier's default.
	IntervalMillis int64 `json:"intervalMillis,omitempty"`
	// SentAt is the agent's clock when sending; the server uses it to move the peers' times
	// onto its own clock, so that clock skew between nodes does not age or freshen reports.
	SentAt time.Time `json:"sentAt,omitzero"`
	// Executor is the agent's account of the latest Command it received, nil before any.
	Executor *ExecutorStatus `json:"executor,omitempty"`
	// RunningContainers is the runtime's own read-back when this heartbeat was sent: how many
	// workload containers (the agent's pod excepted) have not exited. It is read afresh for
	// every heartbeat, apart from the executor's account; nil while the agent has no runtime
	// connection (before its first command).
	RunningContainers *int `json:"runningContainers,omitempty"`
	// ProbePort is the TCP port the agent accepts its peers' probes on; 0: it accepts none.
	ProbePort int `json:"probePort,omitempty"`
	// ProbeHost is the address peers probe the node at; empty means the address the heartbeat
	// came from (set it when the agent's traffic to the controller is translated, e.g. by NAT).
	ProbeHost string `json:"probeHost,omitempty"`
	// KubeletPort is the kubelet's port on ProbeHost, which peers probe too (a node whose agent
	// crashed but whose kubelet answers is not dead); 0: not probed.
	KubeletPort int `json:"kubeletPort,omitempty"`
	// Datagrams says the agent can send its heartbeats as datagrams: an HTTPS answer then
	// carries a DatagramKey when DatagramKeyID is not the server's current key for the node.
	Datagrams bool `json:"datagrams,omitempty"`
	// DatagramKeyID is the ID of the datagram key the agent holds, empty for none.
	DatagramKeyID []byte `json:"datagramKeyID,omitempty"`
	// SelfFenceWithinMillis is how long after the node was last reached (the controller, the
	// API server, a peer) it has been fenced at the latest: --self-fence-after plus the
	// timeout of the watchdog its agent pets (--watchdog-timeout), which resets the node even
	// when the agent stops. 0: the agent promises nothing (self-fencing off, or no petted
	// watchdog), and the SelfFence method must not rely on it. At most MaxSelfFenceWithinMillis.
	SelfFenceWithinMillis int64 `json:"selfFenceWithinMillis,omitempty"`
}

// MaxSelfFenceWithinMillis bounds Report.SelfFenceWithinMillis (a day).
const MaxSelfFenceWithinMillis = 24 * 3600 * 1000

// PeerReport is one probe of a peer.
type PeerReport struct {
	Node      string    `json:"node"`
	Reachable bool      `json:"reachable"`
	At        time.Time `json:"at"`
}

// Heartbeat is the latest heartbeat the server accepted from one node.
type Heartbeat struct {
	// Node is the CommonName of the client certificate it came with.
	Node           string
	BootID         string
	Seq            uint64
	Instance       string
	KubeletHealthy bool
	Interval       time.Duration
	// Peers are the node's probes of its peers, their times on the server's clock. The slice
	// is never modified after it is recorded.
	Peers []PeerReport
	// ProbedBy are the peers whose probes the node's agent acknowledged (Report's), their
	// times on the server's clock; never modified after it is recorded.
	ProbedBy []PeerReport
	// Received is when the server accepted it, on the server's clock.
	Received time.Time
	// SentAt is the agent's clock when sending (Report's), zero when it stated none.
	SentAt time.Time
	// Sent is when it was sent, on the server's clock, as the server can tell it: SentAt moved
	// by the least difference between arrival and SentAt among the node's recent heartbeats
	// (the clocks' offset plus the shortest delay). A heartbeat the network held back (an HTTPS
	// request retransmitted after a partition heals) reads as sent when it was, not when it
	// arrived. Late by that shortest delay at most while the agent's clock runs steadily; early
	// when the agent's clock was stepped back since. Zero when it cannot be told: no SentAt, or
	// no earlier heartbeat of the node to compare with. Evidence that something happened after
	// a moment (a read-back of the runtime from after a window's end) takes Sent; a sign of life
	// takes Received, which is never early.
	Sent time.Time
	// CertNotAfter is when the agent's client certificate expires.
	CertNotAfter time.Time
	// Executor is the executor status this heartbeat carried, nil for none (see also
	// Server.ExecutorStatus, which keeps the latest one across heartbeats without).
	Executor *ExecutorStatus
	// RunningContainers is the runtime read-back this heartbeat carried (Report's).
	RunningContainers *int
	// ProbeAddresses are where peers probe this node (its agent's probe port, then its
	// kubelet's port), empty when it accepts no probes.
	ProbeAddresses []string
	// SelfFenceWithin is the Report's SelfFenceWithinMillis: 0 when the agent does not fence
	// itself.
	SelfFenceWithin time.Duration
}

// PeerTarget is a node an agent is to probe, and where.
type PeerTarget struct {
	Node string `json:"node"`
	// Addresses are host:port pairs: first the peer's agent probe port (ProbeServer: its TLS
	// certificate must name Node), then its kubelet's port (a TCP connection accepted is
	// enough). The peer counts as reachable when any of them answers.
	Addresses []string `json:"addresses"`
}
