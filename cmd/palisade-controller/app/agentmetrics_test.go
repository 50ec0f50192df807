package app

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/detectors/lease"
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

// The renewal lateness gauge reads the renewals' cluster lateness at scrape time; registering
// a second controller's replaces the first's.
func TestRenewalLatenessMetric(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	late := lease.NewRenewals()
	now := time.Now()
	for i := range 3 {
		at := now.Add(time.Duration(i-2) * 12 * time.Second)
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: "n1"},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: at}, LeaseDurationSeconds: ptr.To[int32](40)}}
		late.SeenLease("n1", l, at, time.Time{})
	}
	for _, r := range []*lease.Renewals{lease.NewRenewals(), late} {
		if err := registerLatenessMetric(reg, r); err != nil {
			t.Fatalf("registering: %v", err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "palisade_lease_renewal_lateness_seconds" || mfs[0].GetMetric()[0].GetGauge().GetValue() != 2 {
		t.Errorf("gathered %v, want palisade_lease_renewal_lateness_seconds 2 (renewals seen 12 s apart, every 10 s)", mfs)
	}
}
