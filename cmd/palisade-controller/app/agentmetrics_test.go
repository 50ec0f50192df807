package app

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type counts struct{ missing, heartbeating int }

func (c counts) AgentCounts() (int, int) { return c.missing, c.heartbeating }

// The agent gauges read the heartbeat server's counts at scrape time; registering a second
// server's replaces the first's.
func TestAgentMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for _, src := range []counts{{5, 5}, {2, 7}} {
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
		got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	if got["palisade_agents_missing"] != 2 || got["palisade_agents_heartbeating"] != 7 || len(got) != 2 {
		t.Errorf("gathered %v, want the second server's 2 missing and 7 heartbeating", got)
	}
}
