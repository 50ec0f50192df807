package fencing

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	stormGuardActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "palisade_storm_guard_active",
		Help: "1 while a policy's storm guard stops automatic fencing.",
	}, []string{"policy"})
	policyUnhealthyNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "palisade_policy_unhealthy_nodes",
		Help: "Nodes of a policy whose verdict is failed.",
	}, []string{"policy"})
	fencesCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "palisade_fences_created_total",
		Help: "NodeFences created, by trigger (Detected, Manual).",
	}, []string{"trigger"})
	fencesEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "palisade_fences_ended_total",
		Help: "NodeFences that reached Released or Failed.",
	}, []string{"phase"})
	nodesRecovered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "palisade_nodes_recovered_total",
		Help: "Released nodes that came back clean and were unfenced, by how they were found clean (Rebooted, ConfirmedClean).",
	}, []string{"how"})
	fencesDisproved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "palisade_fences_disproved_total",
		Help: "Confirmed fences whose node showed life afterwards (Lease, AgentHeartbeat, PeerProbe): nothing was released and the chain escalated.",
	}, []string{"method", "signal"})
)

// RegisterMetrics registers the fencing metrics with r (cmd/ calls it once).
func RegisterMetrics(r prometheus.Registerer) {
	r.MustRegister(stormGuardActive, policyUnhealthyNodes, fencesCreated, fencesEnded, fencesDisproved, nodesRecovered)
}
