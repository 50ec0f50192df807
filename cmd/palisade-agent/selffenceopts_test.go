package main

import (
	"testing"
	"time"
)

// The agent promises the controller a self-fence (selffence.Config.TerminateWithin, which its
// heartbeats report) only when it can stop the workload for good: a runtime to terminate the
// pods with and a kubelet stop command, without which the kubelet starts them again (k3s and
// RKE2 run with kubeletStopCommand "").
func TestSelfFencePromisedOnlyWhenItHolds(t *testing.T) {
	for _, tc := range []struct {
		cri, stop string
		want      time.Duration
	}{
		{"/run/containerd/containerd.sock", "systemctl stop kubelet", 2 * time.Minute},
		{"/run/containerd/containerd.sock", "", 0},
		{"", "systemctl stop kubelet", 0},
	} {
		o := options{selfFenceAfter: time.Minute, executorTimeout: 2 * time.Minute, criEndpoint: tc.cri, kubeletStopCommand: tc.stop, interval: time.Second}
		if got := o.selfFence("boot").TerminateWithin; got != tc.want {
			t.Errorf("--cri-endpoint %q --kubelet-stop-command %q: TerminateWithin %s, want %s", tc.cri, tc.stop, got, tc.want)
		}
	}
}
