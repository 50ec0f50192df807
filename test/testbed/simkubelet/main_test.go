package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--kubeconfig=k", "--node-name=n1", "--renew-interval=1s"})
	if err != nil {
		t.Fatal(err)
	}
	want := options{kubeconfig: "k", nodeName: "n1", renewInterval: time.Second, healthzAddress: "127.0.0.1:10248", portAddress: "0.0.0.0:10250"}
	if o != want {
		t.Errorf("options %+v, want %+v", o, want)
	}
	_, err = parseFlags([]string{"--renew-interval=0s", "extra"})
	for _, msg := range []string{"--kubeconfig is required", "--node-name is required", "--renew-interval must be positive", "unexpected arguments"} {
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("parseFlags error %v, want it to say %q", err, msg)
		}
	}
}

func TestReadyPatch(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	earlier := metav1.NewTime(now.Add(-time.Hour))
	ready := func(status corev1.ConditionStatus, heartbeatAge time.Duration) []corev1.NodeCondition {
		return []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(now.Add(-heartbeatAge)), LastTransitionTime: earlier},
		}
	}
	for name, tc := range map[string]struct {
		conditions []corev1.NodeCondition
		wantPatch  bool
		transition metav1.Time
	}{
		"ready, fresh heartbeat: nothing to write": {ready(corev1.ConditionTrue, 10*time.Second), false, earlier},
		"ready, stale heartbeat: heartbeat only":   {ready(corev1.ConditionTrue, 2*time.Minute), true, earlier},
		"marked Unknown: back to True":             {ready(corev1.ConditionUnknown, time.Second), true, now},
		"no Ready condition yet":                   {nil, true, now},
	} {
		t.Run(name, func(t *testing.T) {
			c, patch := readyPatch(tc.conditions, now)
			if (patch != nil) != tc.wantPatch {
				t.Fatalf("patch %s, want one: %v", patch, tc.wantPatch)
			}
			if !c.LastTransitionTime.Equal(&tc.transition) || c.Status != corev1.ConditionTrue {
				t.Errorf("condition %+v, want True since %s", c, tc.transition)
			}
			if patch == nil {
				return
			}
			var got struct {
				Status corev1.NodeStatus `json:"status"`
			}
			if err := json.Unmarshal(patch, &got); err != nil {
				t.Fatal(err)
			}
			want := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: tc.transition}}
			if diff := cmp.Diff(want, got.Status.Conditions); diff != "" {
				t.Errorf("patched conditions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFailureLogOncePerChange(t *testing.T) {
	var buf bytes.Buffer
	f := failureLog{log: slog.New(slog.NewJSONHandler(&buf, nil))}
	timeout, refused := errors.New("timeout"), errors.New("refused")
	for _, err := range []error{nil, timeout, timeout, timeout, refused, refused, nil, nil, timeout} {
		f.report("renewing lease", err)
	}
	var msgs []string
	for line := range strings.Lines(buf.String()) {
		var rec struct {
			Msg, Err, LastErr string
			Failures          int
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		msgs = append(msgs, strings.TrimSpace(rec.Msg+" "+rec.Err))
		if rec.Msg == "renewing lease recovered" && (rec.Failures != 5 || rec.LastErr != "refused") {
			t.Errorf("recovery logged %d failures, last %q; want 5, refused", rec.Failures, rec.LastErr)
		}
	}
	want := []string{
		"renewing lease failed timeout",
		"renewing lease recovered",
		"renewing lease failed timeout",
	}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}

// TestLeaseDuration: four renewal intervals in whole seconds, as a kubelet's, at least one.
func TestLeaseDuration(t *testing.T) {
	for renew, want := range map[time.Duration]int32{10 * time.Second: 40, time.Second: 4, 2500 * time.Millisecond: 10, 100 * time.Millisecond: 1} {
		if got := leaseDurationSeconds(renew); got != want {
			t.Errorf("renewed every %s: duration %d, want %d", renew, got, want)
		}
	}
}
