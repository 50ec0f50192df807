package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// TestAgentRefusesAnOlderFencesOrder: node 1's agent already took fencing token 50 from a later
// fence (its state directory says so, as it would after a restart), and the controller's fence
// draws a smaller token, as a replica whose counter fell behind would, or as a late copy of an
// earlier fence's order. The agent refuses the order and says why; the workload keeps running
// (the refusal changed nothing); the controller records the refusal, escalates to power-off and
// releases only after that confirms.
func TestAgentRefusesAnOlderFencesOrder(t *testing.T) {
	s := startExecutorScene(t, sceneOptions{kubeletHealthy: true, methods: func(ipmi v1alpha1.Method) []v1alpha1.Method {
		return []v1alpha1.Method{executorMethod(30 * time.Second), ipmi}
	}})
	if err := os.MkdirAll(filepath.Dir(s.agentTokenFile()), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.agentTokenFile(), []byte("50\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.diesWithPower(t, s.agent(t, s.addr))
	n1 := s.env.Node(1)
	n1.PauseHeartbeats()
	nf := waitFence(t, s.env.Cluster, n1.Name(), 90*time.Second, phaseIs(v1alpha1.PhaseReleased))
	want := []string{"Terminate:Succeeded", "ConfirmTerminated:Failed", "PowerOff:Succeeded", "ConfirmOff:Succeeded", "VerifyFenced:Succeeded", "Taint:Succeeded", "DeletePods:Succeeded", "ReleaseAttachments:Succeeded"}
	if diff := cmp.Diff(want, trace(nf)); diff != "" {
		t.Errorf("step trace (-want +got):\n%s", diff)
	}
	if nf.Status.Token < 1 || nf.Status.Token >= 50 {
		t.Fatalf("the fence's token %d: the scene needs one below the agent's 50", nf.Status.Token)
	}
	// The order was sent (Terminate); reading the agent's answer back (ConfirmTerminated)
	// finds the refusal.
	var refused *v1alpha1.Step
	for i := range nf.Status.Steps {
		if nf.Status.Steps[i].Name == v1alpha1.StepConfirmTerminated {
			refused = &nf.Status.Steps[i]
		}
	}
	for _, w := range []string{"refused", "older than token 50", "never carried out"} {
		if refused == nil || refused.Reason != "StaleFencingToken" || !strings.Contains(refused.Message, w) {
			t.Errorf("ConfirmTerminated step %+v: want reason StaleFencingToken and a message saying %q", refused, w)
		}
	}
	if !s.workloadRunning(t) {
		t.Error("the workload container was terminated: the agent carried out an order it should have refused")
	}
	if got := s.agentToken(t); got != "50" {
		t.Errorf("the agent's recorded token is %q after an older order, want 50 kept", got)
	}
	if offs, err := n1.BMC.OffCommands(); err != nil || offs == 0 {
		t.Errorf("%d power-off commands (err %v): the refusal should have escalated to power-off", offs, err)
	}
}
