package channel

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"palisade.dev/palisade/detectors/classify"
)

var (
	agentsMissingDesc = prometheus.NewDesc("palisade_agents_missing",
		"Nodes whose agent has heartbeated to this controller and whose latest heartbeat is older than 3 of its own heartbeat intervals: the agents the controller counts as lost. Only the leader serves heartbeats.",
		nil, nil)
	agentsHeartbeatingDesc = prometheus.NewDesc("palisade_agents_heartbeating",
		"Nodes whose agent has heartbeated to this controller within the last 3 of its own heartbeat intervals. Only the leader serves heartbeats.",
		nil, nil)
)

// Collector exports how many nodes' agents a Server hears and how many it lost, counted at
// scrape time from the server's latest heartbeats (in O(nodes), without copying them).
type Collector struct {
	s *Server
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the Collector of s's agents; it reads the time from s's clock
// (ServerOptions.Now).
func NewCollector(s *Server) *Collector { return &Collector{s: s} }

// RegisterMetrics registers the Collector of s with r, replacing the Collector of a Server
// registered with r before (a controller serves heartbeats from one Server; tests start
// several in one process).
func RegisterMetrics(r prometheus.Registerer, s *Server) error {
	c := NewCollector(s)
	r.Unregister(c) // equal Collectors are those with the same descriptors
	return r.Register(c)
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- agentsMissingDesc
	ch <- agentsHeartbeatingDesc
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	now := c.s.opts.Now()
	var missing, heartbeating int
	c.s.EachReceived(func(_ string, received time.Time, interval time.Duration) {
		if agentLost(received, interval, now) {
			missing++
		} else {
			heartbeating++
		}
	})
	ch <- prometheus.MustNewConstMetric(agentsMissingDesc, prometheus.GaugeValue, float64(missing))
	ch <- prometheus.MustNewConstMetric(agentsHeartbeatingDesc, prometheus.GaugeValue, float64(heartbeating))
}

// agentLost is the detectors' rule (detectors/classify, and the controller's agent-loss watch
// in fencing): an agent is lost once more than classify.DefaultMissedHeartbeats of its own
// intervals (classify.DefaultInterval when it states none) have passed since its latest
// heartbeat arrived.
func agentLost(received time.Time, interval time.Duration, now time.Time) bool {
	if interval <= 0 {
		interval = classify.DefaultInterval
	}
	return now.Sub(received) > time.Duration(classify.DefaultMissedHeartbeats)*interval
}
