package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"palisade.dev/palisade/providers/agent/channel"
)

var (
	agentsMissingDesc = prometheus.NewDesc("palisade_agents_missing",
		"Nodes whose agent has heartbeated to this controller and whose latest heartbeat is older than 3 of its own heartbeat intervals: the agents the controller counts as lost. Only the leader serves heartbeats.",
		nil, nil)
	agentsHeartbeatingDesc = prometheus.NewDesc("palisade_agents_heartbeating",
		"Nodes whose agent has heartbeated to this controller within the last 3 of its own heartbeat intervals. Only the leader serves heartbeats.",
		nil, nil)
	agentDatagramsDesc = prometheus.NewDesc("palisade_agent_heartbeat_datagrams_total",
		"Heartbeat datagrams the agents' heartbeat server received, by result: accepted; unknown_key (a key this controller does not hold, e.g. after a leader change: the agent gets a new one over HTTPS); unauthenticated (a wrong HMAC: forged or corrupted); replayed (a sequence number not above the key's last); invalid (authenticated but not a valid heartbeat of the key's node); malformed.",
		[]string{"result"}, nil)
)

// agentCounter is the heartbeat server's count of its agents (channel.Server.AgentCounts).
type agentCounter interface {
	AgentCounts() (missing, heartbeating int)
	// DatagramCounts are the datagrams received by result, in channel.DatagramResults' order.
	DatagramCounts() []uint64
}

// agentCollector exports the heartbeat server's agent counts at scrape time.
type agentCollector struct{ src agentCounter }

func (c agentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- agentsMissingDesc
	ch <- agentsHeartbeatingDesc
	ch <- agentDatagramsDesc
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	missing, heartbeating := c.src.AgentCounts()
	ch <- prometheus.MustNewConstMetric(agentsMissingDesc, prometheus.GaugeValue, float64(missing))
	ch <- prometheus.MustNewConstMetric(agentsHeartbeatingDesc, prometheus.GaugeValue, float64(heartbeating))
	for i, n := range c.src.DatagramCounts() {
		ch <- prometheus.MustNewConstMetric(agentDatagramsDesc, prometheus.CounterValue, float64(n), channel.DatagramResults[i])
	}
}

// registerAgentMetrics registers the collector of src with r, replacing one registered before
// (a controller serves heartbeats from one server; tests start several managers in a process).
func registerAgentMetrics(r prometheus.Registerer, src agentCounter) error {
	c := agentCollector{src: src}
	r.Unregister(c) // equal collectors are those with the same descriptors
	return r.Register(c)
}
