package app

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"palisade.dev/palisade/providers/agent/channel"
)

type counts struct {
	missing, heartbeating int
	accepted              uint64
}

func (c counts) AgentCounts() (int, int) { return c.missing, c.heartbeating }

func (c counts) DatagramCounts() []uint64 {
	out := make([]uint64, len(channel.DatagramResults))
	out[0] = c.accepted
	return out
}

// The agent gauges read the heartbeat server's counts at scrape time; registering a second
// server's replaces the first's.
func TestAgentMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for _, src := range []counts{{5, 5, 1}, {2, 7, 40}} {
		if err := registerAgentMetrics(reg, src); err != nil {
			t.Fatalf("registering: %v", err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			got[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	if got["palisade_agents_missing"] != 2 || got["palisade_agents_heartbeating"] != 7 || got["palisade_agent_heartbeat_datagrams_total{accepted}"] != 40 ||
		got["palisade_agent_heartbeat_datagrams_total{replayed}"] != 0 || len(got) != 2+len(channel.DatagramResults) {
		t.Errorf("gathered %v, want the second server's 2 missing, 7 heartbeating, 40 datagrams accepted and every result", got)
	}
}
