package fencing

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// fenceBuckets suit the stages of a fence: seconds to a few minutes.
var fenceBuckets = []float64{1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 300, 600}

var (
	stormGuardActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "palisade_storm_guard_active",
		Help: "1 while a policy's storm guard stops automatic fencing.",
	}, []string{"policy"})
	policyUnhealthyNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "palisade_policy_unhealthy_nodes",
		Help: "Nodes of a policy that look failed (verdict Dead, Partitioned or KubeletDown) or late (Suspect): the storm guard's count.",
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
		Help: "Confirmed fences whose node showed life afterwards (Lease, AgentHeartbeat, PeerProbe, WorkloadRunning): nothing more was released (pods or attachments released before it stay so; the NodeFence says which) and the chain escalated; SameBootID: after its release, a power fence's node posted its status with the boot ID it had when fenced (Recovered=False PowerOffDisproved: check the node at once).",
	}, []string{"method", "signal"})
)

var (
	fenceConfirmSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "palisade_fence_confirm_seconds",
		Help:    "From a released fence's creation (its detection, or the request) to its confirmation, by the method that confirmed it and the verdict (Dead, Partitioned, KubeletDown; Manual or NodeDeleted without one).",
		Buckets: fenceBuckets,
	}, []string{"method", "verdict"})
	fenceReleaseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "palisade_fence_release_seconds",
		Help:    "From a released fence's creation (its detection, or the request) to the end of its release, by the method that confirmed it and the verdict.",
		Buckets: fenceBuckets,
	}, []string{"method", "verdict"})
	fenceRecoverySeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "palisade_fence_recovery_seconds",
		Help:    "From a fence's release to its node's recovery (unfenced), by how the node was found clean (Rebooted, ConfirmedClean).",
		Buckets: []float64{10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400},
	}, []string{"how"})
)

// RegisterMetrics registers the fencing metrics with r (cmd/ calls it once).
func RegisterMetrics(r prometheus.Registerer) {
	r.MustRegister(stormGuardActive, policyUnhealthyNodes, fencesCreated, fencesEnded, fencesDisproved, nodesRecovered,
		fenceConfirmSeconds, fenceReleaseSeconds, fenceRecoverySeconds, fenceStates)
}

// observeReleased records the durations of a fence that was just released.
func observeReleased(nf *v1alpha1.NodeFence) {
	verdict := verdictLabel(nf)
	created := nf.CreationTimestamp.Time
	if f := nf.Status.FencedTime; f != nil {
		fenceConfirmSeconds.WithLabelValues(nf.Status.Method, verdict).Observe(nonNegative(f.Sub(created)))
	}
	if r := nf.Status.ReleasedTime; r != nil {
		fenceReleaseSeconds.WithLabelValues(nf.Status.Method, verdict).Observe(nonNegative(r.Sub(created)))
	}
}

// observeRecovered records how long a recovered node stayed fenced after its release.
func observeRecovered(nf *v1alpha1.NodeFence) {
	rec := nf.Status.Recovery
	if rec == nil || rec.RecoveredTime == nil || nf.Status.ReleasedTime == nil {
		return
	}
	fenceRecoverySeconds.WithLabelValues(string(rec.How)).Observe(nonNegative(rec.RecoveredTime.Sub(nf.Status.ReleasedTime.Time)))
}

// verdictLabel is the detectors' verdict of a detected fence, else its trigger.
func verdictLabel(nf *v1alpha1.NodeFence) string {
	if nf.Spec.Verdict != "" {
		return nf.Spec.Verdict
	}
	return string(nf.Spec.Trigger)
}

func nonNegative(d time.Duration) float64 { return max(d, 0).Seconds() }

// fenceStates are the gauges of where the fences stand, as the leading controller last
// recorded them: fences under way, and nodes released and not recovered by why they stay
// fenced. Only the leader reconciles fences, so only its gauges count.
var fenceStates = &stateCollector{nodes: map[string]fenceState{}}

// fenceState is where one node's fence stands.
type fenceState struct {
	inProgress bool
	since      time.Time // in progress: when the fence was created
	held       string    // released, not recovered: the Recovered=False reason, or "Released"
}

type stateCollector struct {
	mu    sync.Mutex
	nodes map[string]fenceState
	now   func() time.Time // time.Now when nil
}

var (
	fencesInProgressDesc = prometheus.NewDesc("palisade_fences_in_progress",
		"Fences under way: created and neither released nor failed.", nil, nil)
	nodesFencedDesc = prometheus.NewDesc("palisade_nodes_fenced",
		"Nodes whose fence was released and that are not recovered, by why they stay fenced (the NodeFence's Recovered=False reason: NodeNotBack, BootIDUnchanged, Flapping, …; Released before it is judged).",
		[]string{"reason"}, nil)
	oldestInProgressDesc = prometheus.NewDesc("palisade_fence_oldest_in_progress_seconds",
		"Age of the oldest fence under way (since its NodeFence was created), 0 when none is: a fence that neither releases nor fails waits on something a person must fix (its conditions say what).",
		nil, nil)
)

// observe records where nf stands.
func (c *stateCollector) observe(nf *v1alpha1.NodeFence) {
	var st fenceState
	switch nf.Status.Phase {
	case v1alpha1.PhaseReleased:
		st.held = string(v1alpha1.PhaseReleased)
		if cond := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionRecovered); cond != nil && cond.Status == "False" {
			st.held = cond.Reason
		}
	case v1alpha1.PhaseFailed, v1alpha1.PhaseRecovered:
	default:
		st.inProgress = !nf.Spec.DryRun
		if st.inProgress {
			st.since = nf.CreationTimestamp.Time
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st == (fenceState{}) {
		delete(c.nodes, nf.Name)
		return
	}
	c.nodes[nf.Name] = st
}

// forget drops a deleted fence.
func (c *stateCollector) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, name)
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- fencesInProgressDesc
	ch <- nodesFencedDesc
	ch <- oldestInProgressDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	c.mu.Lock()
	inProgress, held, oldest := 0, map[string]int{}, time.Duration(0)
	for _, st := range c.nodes {
		if st.inProgress {
			inProgress++
			if !st.since.IsZero() {
				oldest = max(oldest, now.Sub(st.since))
			}
		}
		if st.held != "" {
			held[st.held]++
		}
	}
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(fencesInProgressDesc, prometheus.GaugeValue, float64(inProgress))
	ch <- prometheus.MustNewConstMetric(oldestInProgressDesc, prometheus.GaugeValue, nonNegative(oldest))
	for reason, n := range held {
		ch <- prometheus.MustNewConstMetric(nodesFencedDesc, prometheus.GaugeValue, float64(n), reason)
	}
}
