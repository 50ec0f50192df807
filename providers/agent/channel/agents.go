package channel

import (
	"time"

	"palisade.dev/palisade/detectors/classify"
)

// AgentCounts counts the nodes whose agent has heartbeated to this server: missing, those
// whose latest heartbeat is older than 3 of its intervals (the controller's notion of an agent
// lost; the longer of its own and the one ServerOptions.IntervalFor asks, as the classifier
// judges it: classify.JudgedInterval), and heartbeating, the others; at the server's clock
// (ServerOptions.Now), in O(nodes) without copying the heartbeats. The controller exports them as metrics
// (palisade_agents_missing, palisade_agents_heartbeating); this package stays free of
// Prometheus, which the agent binary must not link.
func (s *Server) AgentCounts() (missing, heartbeating int) {
	now := s.opts.Now()
	s.EachReceived(func(node string, received time.Time, interval time.Duration) {
		if agentLost(received, classify.JudgedInterval(node, interval, s.opts.IntervalFor), now) {
			missing++
		} else {
			heartbeating++
		}
	})
	return missing, heartbeating
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
