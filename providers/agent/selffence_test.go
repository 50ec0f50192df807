package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// signals is a node's last signal, the other nodes whose agents are silent, and what the
// node's agent said of its self-fence (unheard: nothing).
type signals struct {
	last             time.Time
	silent           []string
	within, interval time.Duration
	unheard          bool
	// agentStopped is how long before the node's last signal its agent was last known to run
	// (0: as late as the node).
	agentStopped time.Duration
}

// armed is an agent that fences itself 1 s after it was last reached, beating every 250 ms:
// within a safeAfter of 5 s with its margin (2 s).
func armed(last time.Time, silent []string) signals {
	return signals{last: last, silent: silent, within: time.Second, interval: 250 * time.Millisecond}
}

func (s signals) SelfFenceWithin(string) (time.Duration, time.Duration, bool) {
	return s.within, s.interval, !s.unheard
}

func (s signals) LastSignal(context.Context, string, time.Time) (time.Time, error) {
	return s.last, nil
}

func (s signals) SilentAgents(string, time.Time) []string { return s.silent }

func (s signals) AgentLastAlive(string) time.Time { return s.last.Add(-s.agentStopped) }

// The self-fence is confirmed only once the node has been silent for safeAfter since the wait
// began (not since its last known signal: a peer's earlier reach of it is forgotten once the
// peer fails to reach it, while the node's agent counts its isolation only from then); a signal
// after the wait began, or the method's time running out, fails it.
func TestSelfFenceCheck(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		last    time.Time
		now     time.Time
		expired bool
		want    providers.State
		reason  providers.Reason
		silent  []string // other nodes' agents silent too
	}{
		{"silent for less than safeAfter", start.Add(-time.Second), start.Add(2 * time.Second), false, providers.InProgress, providers.ReasonWaitingForSafeTime, nil},
		{"silent for safeAfter counted from the last signal, not from the wait's start", start.Add(-time.Second), start.Add(4 * time.Second), false, providers.InProgress, providers.ReasonWaitingForSafeTime, nil},
		{"silent for safeAfter since the wait began", start.Add(-time.Second), start.Add(5 * time.Second), false, providers.Confirmed, "", nil},
		// Partitioned for minutes (its peers reached it; the controller kept only their latest
		// reports), then its peers lost it: the last known signal is minutes old, but its agent
		// began to count its isolation only when the peers were lost, just before the wait.
		{"last known signal long before the wait", start.Add(-2 * time.Minute), start.Add(time.Second), false, providers.InProgress, providers.ReasonWaitingForSafeTime, nil},
		{"no signal known: counted from the wait's start", time.Time{}, start.Add(5 * time.Second), false, providers.Confirmed, "", nil},
		{"a signal after the wait began", start.Add(time.Second), start.Add(10 * time.Second), false, providers.Failed, providers.ReasonNodeReachable, nil},
		{"time is up", start.Add(-time.Second), start.Add(2 * time.Second), true, providers.Failed, providers.ReasonTimedOut, nil},
		// An island: n1 and n2 cut off together reach each other, so neither agent counts itself
		// isolated, and the controller hears neither.
		{"another agent silent too", start.Add(-time.Second), start.Add(5 * time.Second), false, providers.Failed, providers.ReasonOtherAgentsSilent, []string{"n2"}},
		{"other agents silent, still waiting", start.Add(-time.Second), start.Add(2 * time.Second), false, providers.InProgress, providers.ReasonWaitingForSafeTime, []string{"n2", "n3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nf := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}}
			nf.Status.Steps = []v1alpha1.Step{{Name: v1alpha1.StepAwaitIsolation, State: v1alpha1.StepSucceeded, StartTime: metav1.NewTime(start)}}
			req := providers.Request{Fence: nf, Now: tt.now, Expired: tt.expired, Method: v1alpha1.Method{Name: "self",
				Type: v1alpha1.MethodSelfFence, SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 5 * time.Second}}}}
			got, err := NewSelfFence(armed(tt.last, tt.silent)).Check(context.Background(), req)
			if err != nil || got.State != tt.want || got.Reason != tt.reason {
				t.Errorf("Check = %+v, %v; want %s %s", got, err, tt.want, tt.reason)
			}
		})
	}
}

// The node's silence is a fence only when its agent said that it fences itself once cut off, in
// time: an agent the controller never heard, one with self-fencing off (the chart's default) or
// without a runtime, or one slower than safeAfter less 4 heartbeat intervals fails the method at
// once (Fence) and at the safe time (Check: its agent restarted without self-fencing), with
// SelfFenceNotArmed, and the chain goes on. Before, each of them was confirmed after safeAfter,
// and the node released with its workload maybe running.
func TestSelfFenceReliesOnlyOnAnArmedAgent(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		sig  signals
		want string
	}{
		{"agent never heard", signals{unheard: true}, "heard no heartbeat"},
		{"self-fencing off, or no petted watchdog", signals{within: 0, interval: time.Second}, "it pets no watchdog"},
		{"slower than safeAfter allows", signals{within: 4 * time.Second, interval: time.Second}, "raise safeAfter to at least 8s"},
		{"the margin counts the judged interval", signals{within: time.Second, interval: 2 * time.Second}, "raise safeAfter to at least 9s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nf := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}}
			req := providers.Request{Fence: nf, Now: start, Method: v1alpha1.Method{Name: "self",
				Type: v1alpha1.MethodSelfFence, SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 5 * time.Second}}}}
			tc.sig.last = start.Add(-time.Minute)
			sf := NewSelfFence(tc.sig)
			got, err := sf.Fence(context.Background(), req)
			if err != nil || got.State != providers.Failed || got.Reason != providers.ReasonSelfFenceNotArmed || !strings.Contains(got.Message, tc.want) {
				t.Errorf("Fence = %+v, %v; want Failed %s saying %q", got, err, providers.ReasonSelfFenceNotArmed, tc.want)
			}
			nf.Status.Steps = []v1alpha1.Step{{Name: v1alpha1.StepAwaitIsolation, State: v1alpha1.StepSucceeded, StartTime: metav1.NewTime(start)}}
			req.Now = start.Add(6 * time.Second)
			got, err = sf.Check(context.Background(), req)
			if err != nil || got.State != providers.Failed || got.Reason != providers.ReasonSelfFenceNotArmed {
				t.Errorf("Check after safeAfter = %+v, %v; want Failed %s, never Confirmed", got, err, providers.ReasonSelfFenceNotArmed)
			}
		})
	}
}

// An agent that fell silent well before its node did (the node's Lease renewed, or a peer
// reached it, after the agent's last heartbeat and last acknowledged probe) had stopped — a
// crash, a kill, its pod gone — before the node was cut off, and a stopped agent fences
// nothing: the method fails with AgentSilentBeforeNode at once and at the safe time, and the
// chain goes on. An agent silent only a little before its node (the cut's own jitter, a Lease
// renewal seen late) is relied on as before.
func TestSelfFenceNotReliedOnAStoppedAgent(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		stopped time.Duration
		fence   providers.State
		check   providers.State
		reason  providers.Reason
	}{
		{"agent stopped 20 s before its node", 20 * time.Second, providers.Failed, providers.Failed, providers.ReasonAgentSilentBeforeNode},
		{"agent stopped a minute before its node", time.Minute, providers.Failed, providers.Failed, providers.ReasonAgentSilentBeforeNode},
		{"agent silent 2 s before its node's last Lease renewal", 2 * time.Second, providers.InProgress, providers.Confirmed, ""},
		{"agent as late as its node", 0, providers.InProgress, providers.Confirmed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig := armed(start.Add(-time.Second), nil)
			sig.agentStopped = tc.stopped
			sf := NewSelfFence(sig)
			nf := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}}
			req := providers.Request{Fence: nf, Now: start, Method: v1alpha1.Method{Name: "self",
				Type: v1alpha1.MethodSelfFence, SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 5 * time.Second}}}}
			got, err := sf.Fence(context.Background(), req)
			if err != nil || got.State != tc.fence || (tc.fence == providers.Failed && got.Reason != tc.reason) {
				t.Errorf("Fence = %+v, %v; want %s %s", got, err, tc.fence, tc.reason)
			}
			if tc.reason != "" && !strings.Contains(got.Message, "a stopped agent fences nothing") {
				t.Errorf("Fence's message %q does not say why", got.Message)
			}
			nf.Status.Steps = []v1alpha1.Step{{Name: v1alpha1.StepAwaitIsolation, State: v1alpha1.StepSucceeded, StartTime: metav1.NewTime(start)}}
			req.Now = start.Add(6 * time.Second)
			got, err = sf.Check(context.Background(), req)
			if err != nil || got.State != tc.check || got.Reason != tc.reason {
				t.Errorf("Check after safeAfter = %+v, %v; want %s %s", got, err, tc.check, tc.reason)
			}
		})
	}
}
