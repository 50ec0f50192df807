package simnode

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"palisade.dev/palisade/detectors/lease"
)

func TestStatusFresh(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	node := func(bootID string, status corev1.ConditionStatus, age time.Duration) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{
			NodeInfo: corev1.NodeSystemInfo{BootID: bootID},
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(now.Add(-age)),
			}},
		}}
	}
	for name, tc := range map[string]struct {
		node *corev1.Node
		want bool
	}{
		"ready, recent heartbeat":        {node("b1", corev1.ConditionTrue, 10*time.Second), true},
		"ready, heartbeat too old":       {node("b1", corev1.ConditionTrue, 2*time.Minute), false},
		"marked Unknown by the NLC":      {node("b1", corev1.ConditionUnknown, time.Second), false},
		"reports an earlier boot":        {node("b0", corev1.ConditionTrue, time.Second), false},
		"never reported (no conditions)": {&corev1.Node{Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "b1"}}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := statusFresh(tc.node, "b1", now); got != tc.want {
				t.Errorf("statusFresh = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestContainerStatuses(t *testing.T) {
	boot := metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	now := metav1.NewTime(boot.Add(time.Minute))
	running := func(at metav1.Time, restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{
			Name: "app", RestartCount: restarts,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}},
		}
	}
	for name, tc := range map[string]struct {
		previous     []corev1.ContainerStatus
		wantStarted  metav1.Time
		wantRestarts int32
	}{
		"first start":                {nil, now, 0},
		"running since this boot":    {[]corev1.ContainerStatus{running(metav1.NewTime(boot.Add(time.Second)), 2)}, metav1.NewTime(boot.Add(time.Second)), 2},
		"ran before a reboot":        {[]corev1.ContainerStatus{running(metav1.NewTime(boot.Add(-time.Hour)), 2)}, now, 3},
		"not running, not restarted": {[]corev1.ContainerStatus{{Name: "app", RestartCount: 1}}, now, 1},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{
				Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "img"}}},
				Status: corev1.PodStatus{ContainerStatuses: tc.previous},
			}
			got := containerStatuses(pod, boot, now)
			want := struct {
				Started  metav1.Time
				Restarts int32
				Ready    bool
			}{tc.wantStarted, tc.wantRestarts, true}
			gotSummary := want
			gotSummary.Started, gotSummary.Restarts, gotSummary.Ready = got[0].State.Running.StartedAt, got[0].RestartCount, got[0].Ready
			if diff := cmp.Diff(want, gotSummary); diff != "" {
				t.Errorf("container status (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLeaseStatesTheRenewalInterval: the Lease's duration is four renewal intervals, as a
// kubelet's, so that the controller reads the interval the node really renews at.
func TestLeaseStatesTheRenewalInterval(t *testing.T) {
	for _, renew := range []time.Duration{time.Second, 2 * time.Second, 2500 * time.Millisecond, 10 * time.Second} {
		n := &Node{opts: Options{Name: "n1", LeaseRenewInterval: renew}}
		if got := lease.RenewInterval(n.newLease()); got != renew {
			t.Errorf("renewed every %s: the Lease says every %s", renew, got)
		}
	}
}
