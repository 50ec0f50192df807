package sight

import "github.com/prometheus/client_golang/prometheus"

var (
	blind = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "palisade_controller_blind",
		Help: "1 while the controller does not see its canary Lease fresh through its watch: nothing is fenced automatically.",
	})
	seeingSince = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "palisade_controller_seeing_since_timestamp_seconds",
		Help: "When the controller last began to see fresh signals (Unix time); no node's Lease counts as expired before a policy's lease timeout has passed since, and a node silent on every path counts as Dead no sooner than one kubelet renewal interval after it.",
	})
	sightLost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "palisade_controller_sight_lost_total",
		Help: "Times the controller lost sight of fresh signals, by cause (Starting, APIUnreachable, WatchStale, ClockJumped).",
	}, []string{"cause"})
)

// RegisterMetrics registers the sight metrics with r (cmd/ calls it once).
func RegisterMetrics(r prometheus.Registerer) {
	r.MustRegister(blind, seeingSince, sightLost)
}
