package fencing

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
)

// machine is a node's machine as switches recorded by address play it.
type machine struct{ node, addr string }

func (m machine) String() string { return fmt.Sprintf("%s (%s)", m.node, m.addr) }

// switches is a stand-in for BMCs (the real ones, ipmi_sim behind the IPMI provider, are in
// providers/ipmi's TestReadBackOnlyOfTheMachineTurnedOff): each address is a machine that is
// on or off; a lying one accepts the off command and stays on; the first failOffs commands
// time out. The target is the address the Node's annotation names now.
type switches struct {
	c        client.Reader
	on       map[string]bool
	lying    map[string]bool
	offs     map[string]int // off commands taken, by address
	failOffs int            // so many off commands time out first, not taken
	// recorded is the target the API server's copy of n1's fence held at each off command.
	recorded []string
}

func (s *switches) Target(ctx context.Context, req providers.Request) (machine, error) {
	n := &corev1.Node{}
	if err := s.c.Get(ctx, client.ObjectKey{Name: req.Node()}, n); err != nil {
		return machine{}, providers.NewError(providers.ReasonAPIError, err)
	}
	return machine{node: n.Name, addr: n.Annotations[v1alpha1.AnnotationBMCAddress]}, nil
}

func (s *switches) PowerOff(ctx context.Context, m machine) error {
	nf := &v1alpha1.NodeFence{}
	if err := s.c.Get(ctx, client.ObjectKey{Name: m.node}, nf); err != nil {
		return err
	}
	s.recorded = append(s.recorded, lastStep(nf).Target)
	if s.failOffs > 0 {
		s.failOffs--
		return providers.NewError(providers.ReasonUnreachable, fmt.Errorf("%s: timed out", m))
	}
	s.offs[m.addr]++
	if !s.lying[m.addr] {
		s.on[m.addr] = false
	}
	return nil
}

func (s *switches) PowerState(_ context.Context, m machine) (power.State, error) {
	if s.on[m.addr] {
		return power.On, nil
	}
	return power.Off, nil
}

// The machine a power method acts on is recorded on its fence step before the off command,
// and only that machine's read-back confirms the fence. Node n1's BMC is 10.0.0.1; its address
// is then changed to 10.0.0.9, a machine that is off. That machine's Off is no confirmation of
// n1's fence: the method fails with FenceTargetChanged, nothing is sent to 10.0.0.9, and the
// chain's next method (the Executor) fences the node. Before, ConfirmOff read 10.0.0.9 Off and
// released n1, whose machine still ran: changed after the off command (which 10.0.0.1, lying,
// took and stayed on), or between two tries of it (the first timed out).
func TestConfirmationOnlyByTheMachineTurnedOff(t *testing.T) {
	tests := []struct {
		name string
		// changeAt says when the address changes: at the first reconcile whose last step is this
		// one, after this many attempts.
		changeAt v1alpha1.StepName
		attempts int32
		lying    bool // 10.0.0.1 takes the off command and stays on
		failOffs int  // off commands that time out first
	}{
		{"after the off command", v1alpha1.StepConfirmOff, 0, true, 0},
		{"between two tries of the off command", v1alpha1.StepPowerOff, 1, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, "ipmi", "executor")
			sw := &switches{c: w.c, on: map[string]bool{"10.0.0.1": true}, lying: map[string]bool{"10.0.0.1": tt.lying},
				offs: map[string]int{}, failOffs: tt.failOffs}
			w.r.Fencers[v1alpha1.MethodIPMI] = power.NewFencer[machine]("ipmi", sw, "the BMC", nil)
			w.ticks = 120
			w.tick = func(nf *v1alpha1.NodeFence) {
				if len(nf.Status.Steps) == 0 || lastStep(nf).Name != tt.changeAt || lastStep(nf).Attempts < tt.attempts {
					return
				}
				n := &corev1.Node{}
				if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, n); err != nil {
					t.Fatal(err)
				}
				if n.Annotations[v1alpha1.AnnotationBMCAddress] != "10.0.0.9" {
					n.Annotations[v1alpha1.AnnotationBMCAddress] = "10.0.0.9"
					if err := w.c.Update(context.Background(), n); err != nil {
						t.Fatal(err)
					}
				}
			}
			nf := w.run(t)
			t.Logf("trace:\n%s", goldenTrace(nf))
			if !sw.on["10.0.0.1"] {
				t.Fatal("10.0.0.1 was turned off: the test did not test")
			}
			if sw.offs["10.0.0.9"] != 0 {
				t.Errorf("10.0.0.9 got %d off commands", sw.offs["10.0.0.9"])
			}
			var off, changed *v1alpha1.Step
			for i, s := range nf.Status.Steps {
				switch {
				case s.Method == "ipmi" && s.Name == v1alpha1.StepConfirmOff && s.State == v1alpha1.StepSucceeded:
					t.Fatalf("ConfirmOff succeeded on another machine's read-back: %s", s.Message)
				case s.Method == "ipmi" && s.Name == v1alpha1.StepPowerOff:
					off = &nf.Status.Steps[i]
				}
				if s.Method == "ipmi" && s.State == v1alpha1.StepFailed {
					changed = &nf.Status.Steps[i]
				}
			}
			if off == nil || off.Target != "n1 (10.0.0.1)" {
				t.Fatalf("the PowerOff step records target %+v, want n1 (10.0.0.1)", off)
			}
			for i, r := range sw.recorded {
				if r != "n1 (10.0.0.1)" {
					t.Errorf("off command %d sent with %q on record, want n1 (10.0.0.1) recorded before it", i+1, r)
				}
			}
			if len(sw.recorded) != 1 { // the one before the change; none after it
				t.Errorf("%d off commands, want 1", len(sw.recorded))
			}
			if changed == nil || changed.Reason != string(providers.ReasonTargetChanged) {
				t.Fatalf("the ipmi method failed with %+v, want reason %s", changed, providers.ReasonTargetChanged)
			}
			if nf.Status.Phase != v1alpha1.PhaseReleased || nf.Status.Method != "executor" {
				t.Errorf("phase %s by method %s, want Released by the chain's next method, executor", nf.Status.Phase, nf.Status.Method)
			}
		})
	}
}

// No off command goes out before the API server holds the machine's name: a refused write of
// it (a conflict: this copy may be stale) ends the pass with nothing sent, and the next pass
// names the machine again from a fresh read.
func TestNoOffCommandBeforeItsMachineIsRecorded(t *testing.T) {
	w := newWorld(t, "ipmi")
	sw := &switches{c: w.c, on: map[string]bool{"10.0.0.1": true}, offs: map[string]int{}}
	w.r.Fencers[v1alpha1.MethodIPMI] = power.NewFencer[machine]("ipmi", sw, "the BMC", nil)
	refused := 0
	w.r.Client = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if nf, ok := obj.(*v1alpha1.NodeFence); ok && refused < 2 {
				if s := stepOf(nf, v1alpha1.StepPowerOff); s.State == v1alpha1.StepStarted && s.Target != "" {
					refused++
					return apierrors.NewConflict(schema.GroupResource{Group: "fencing.palisade.dev", Resource: "nodefences"}, nf.Name, errors.New("the object has been modified"))
				}
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	w.reconcileErrors = true
	nf, _ := w.advance(t)
	t.Logf("trace:\n%s", goldenTrace(nf))
	if refused != 2 {
		t.Fatalf("%d writes of the machine's name refused, want 2: the test did not test", refused)
	}
	if nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("phase %s, want Released once the name is recorded", nf.Status.Phase)
	}
	if len(sw.recorded) != 1 || sw.recorded[0] != "n1 (10.0.0.1)" {
		t.Errorf("off commands sent with %q on record, want one, with n1 (10.0.0.1)", sw.recorded)
	}
}
