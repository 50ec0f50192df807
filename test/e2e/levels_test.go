package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// TestAllOfLevel: a policy whose first level is the Executor AND a power-off (ipmi_sim), on a
// partitioned node whose agent still heartbeats. Both confirmed: the node is released, its
// workload terminated on containerd and its machine off. The power-off refused (wrong BMC
// password) after the Executor confirmed: the level is not all confirmed, the fence fails and
// nothing is released.
func TestAllOfLevel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wrongBMC bool
	}{{"both confirmed", false}, {"power-off refused", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startExecutorScene(t, sceneOptions{kubeletHealthy: true, methods: func(ipmi v1alpha1.Method) []v1alpha1.Method {
				ipmi.Level, ipmi.Timeout = "stop-and-power", &metav1.Duration{Duration: 6 * time.Second}
				executor := executorMethod(30 * time.Second)
				executor.Level = "stop-and-power"
				return []v1alpha1.Method{executor, ipmi}
			}})
			n1 := s.env.Node(1)
			if tc.wrongBMC {
				wrong := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "wrong-password"},
					StringData: map[string]string{"username": "admin", "password": "not-the-password"}}
				if err := s.env.Cluster.Client.Create(context.Background(), wrong); err != nil {
					t.Fatal(err)
				}
				patchAnnotations(t, s.env, n1.Name(), map[string]any{v1alpha1.AnnotationBMCSecret: "wrong-password"})
			}
			s.diesWithPower(t, s.agent(t, s.addr))
			n1.PauseHeartbeats()
			nf := waitFence(t, s.env.Cluster, n1.Name(), 90*time.Second, fenceEnded)
			offs, err := n1.BMC.OffCommands()
			if err != nil {
				t.Fatal(err)
			}
			if s.workloadRunning(t) {
				t.Error("the workload container still runs: the level's Executor did not terminate it")
			}
			if !tc.wrongBMC {
				want := []string{"Terminate:Succeeded", "ConfirmTerminated:Succeeded", "PowerOff:Succeeded", "ConfirmOff:Succeeded",
					"VerifyFenced:Succeeded", "Taint:Succeeded", "DeletePods:Succeeded", "ReleaseAttachments:Succeeded"}
				if diff := cmp.Diff(want, trace(nf)); diff != "" {
					t.Errorf("step trace (-want +got):\n%s", diff)
				}
				if offs == 0 || nf.Status.Phase != v1alpha1.PhaseReleased {
					t.Errorf("phase %s after %d power-off commands: want Released after the level's power-off", nf.Status.Phase, offs)
				}
				return
			}
			want := []string{"Terminate:Succeeded", "ConfirmTerminated:Succeeded", "PowerOff:Failed"}
			if diff := cmp.Diff(want, trace(nf)); diff != "" {
				t.Errorf("step trace (-want +got):\n%s", diff)
			}
			if st, reason, msg := condition(nf, v1alpha1.ConditionFenced); st != "False" || reason != "BMCAuthFailed" || nf.Status.Phase != v1alpha1.PhaseFailed {
				t.Errorf("phase %s, Fenced condition %s/%s (%s): want Failed, False/BMCAuthFailed", nf.Status.Phase, st, reason, msg)
			}
			if nf.Status.FencedTime != nil || strings.Contains(stepMessage(nf, "VerifyFenced"), "no sign of life") {
				t.Errorf("the half-confirmed level was counted as a fence: fencedTime %v", nf.Status.FencedTime)
			}
			assertNothingReleased(t, s.env, s.w)
		})
	}
}
