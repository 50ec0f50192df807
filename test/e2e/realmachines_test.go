package e2e

import (
	"context"
	"testing"
	"time"

	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/realscene"
)

// A machine cut off from the control plane keeps running its pod, which keeps writing to its
// storage. Palisade (two controller processes, leader election) powers the machine off through
// its BMC before it releases db-0, so the witness store never sees two copies of db-0; vanilla
// Kubernetes with an operator who force-deletes the pod once the node turns NotReady (as people
// do) gets two copies writing at once — which also shows that the checker sees such a violation.
func TestRealMachinesCutOffFromTheControlPlane(t *testing.T) {
	for _, tc := range []struct {
		name     string
		palisade bool
	}{{"palisade", true}, {"vanilla with a force-deleting operator", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := realscene.Start(t, realscene.Options{Machines: 3})
			if tc.palisade {
				s.CreatePolicy(t, 20*time.Second)
				s.StartControllers(t, 2)
			}
			s.DeployWitness(t, 1)
			first, _ := s.WaitWriter(t, realscene.PodName(0), "", time.Minute)
			m := s.Machine(first)
			cut := time.Now()
			if err := s.CutFromControlPlane(m); err != nil {
				t.Fatal(err)
			}
			if !tc.palisade {
				// The operator: kubectl delete pod db-0 --grace-period=0 --force once the node is
				// NotReady, and again while the replacement lands on it (the scheduler can place it
				// there before the node's NoSchedule taint is added, as it did once here).
				s.WaitNotReady(t, first, 2*time.Minute)
				ctx, stop := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); s.ForceDeletingOperator(ctx, t.Logf) }()
				defer func() { stop(); <-done }()
			}
			second, _ := s.WaitWriter(t, realscene.PodName(0), first, 3*time.Minute)
			t.Logf("db-0 writes from %s %s after %s was cut off", second, time.Since(cut).Round(100*time.Millisecond), first)
			time.Sleep(3 * time.Second) // let both copies, if both run, write side by side
			if err := m.Net().Heal(); err != nil {
				t.Fatal(err)
			}
			h, evs := s.History(t), s.Audit(t)
			oneCopy := checker.OneCopy(h, 0)
			v := append(oneCopy, checker.NoEarlyRelease(evs, []string{realscene.ControllerUser})...)
			t.Logf("%d witness records, %d audit events; %s", len(h), len(evs), checker.Report(v))
			switch {
			case tc.palisade && len(v) > 0:
				t.Errorf("Palisade: %d violations", len(v))
			case tc.palisade && m.Running():
				t.Errorf("Palisade released db-0 while %s still runs", first)
			case !tc.palisade && len(oneCopy) == 0:
				t.Errorf("vanilla with a force-deleting operator: the checker saw no two copies of db-0")
			}
		})
	}
}
