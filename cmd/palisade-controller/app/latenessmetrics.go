package app

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"palisade.dev/palisade/detectors/lease"
)

var renewalLatenessDesc = prometheus.NewDesc("palisade_lease_renewal_lateness_seconds",
	"How late past their interval the controller has seen the nodes' Lease renewals come over the last 2 minutes (the 90th percentile, as the upper edge of its histogram bucket; the kubelet's jitter, the API server's answer to its write, the watch's delivery; each gap the longer of the gap seen and the gap between the kubelet's own renewTime stamps). A node silent to its agent and peers counts as Dead before its Lease expires once its renewal is the larger of 1 s and twice this (or twice its own recent lateness) late.",
	nil, nil)

// latenessCollector exports the renewals' lateness at scrape time.
type latenessCollector struct{ renewals *lease.Renewals }

func (c latenessCollector) Describe(ch chan<- *prometheus.Desc) { ch <- renewalLatenessDesc }

func (c latenessCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(renewalLatenessDesc, prometheus.GaugeValue, c.renewals.ClusterLateness(time.Now()).Seconds())
}

// registerLatenessMetric registers the collector of renewals with r, replacing one registered
// before (tests start several managers in a process).
func registerLatenessMetric(r prometheus.Registerer, renewals *lease.Renewals) error {
	c := latenessCollector{renewals}
	r.Unregister(c)
	return r.Register(c)
}
