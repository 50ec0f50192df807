package e2e

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi/simulator"
	vimtypes "github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/providers/aws"
	"palisade.dev/palisade/providers/power"
	"palisade.dev/palisade/providers/redfish"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed/ec2sim"
	"palisade.dev/palisade/test/testbed/redfishsim"
	"palisade.dev/palisade/test/testbed/simnode"
)

// Node 1's BMC address is node 3's (a swapped address): the power-off of node 1 turns node 3 off
// and reads back Off from node 3's BMC. Node 1 keeps renewing its Lease, so nothing of node 1 is
// released; the method fails with NodeAliveAfterFence, the chain escalates to its next method (a
// self-fence, which cannot confirm while the node renews and fails in turn), and the fence ends
// Failed with the node's workload untouched. Node 1's identity check is turned off
// (palisade.dev/bmc-identity-check: "false"), as for a BMC that reports no identity of its own:
// with it on, the power-off would not reach node 3 at all (TestBMCFailuresReleaseNothing), and the
// verify window is the line this test holds.
func TestFenceOfTheWrongMachineReleasesNothing(t *testing.T) {
	env := startScene(t, scenario.Options{Policy: func(p *v1alpha1.FencingPolicy) {
		p.Spec.Methods = append(p.Spec.Methods, v1alpha1.Method{Name: "self-fence", Type: v1alpha1.MethodSelfFence,
			Timeout:   &metav1.Duration{Duration: 8 * time.Second},
			SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 3 * time.Second}}})
	}})
	startController(t, env)
	w := deploy(t, env)
	n1, n3 := env.Node(1), env.Node(3)
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationBMCAddress: n3.BMC.Address(), v1alpha1.AnnotationBMCIdentityCheck: "false"})
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: fence node 1 through a swapped BMC address"})

	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, phaseIs(v1alpha1.PhaseFailed))
	t.Logf("trace: %v", trace(nf))
	if on, err := n3.BMC.PoweredOn(); err != nil || on {
		t.Fatalf("node 3's power on = %t (%v): the swapped address did not power off the other machine, the test did not test", on, err)
	}
	var disproved *v1alpha1.Step
	for i, s := range nf.Status.Steps {
		if s.State == v1alpha1.StepFailed && s.Reason == v1alpha1.ReasonNodeAliveAfterFence {
			disproved = &nf.Status.Steps[i]
			if rest := nf.Status.Steps[i+1:]; len(rest) == 0 || rest[0].Method != "self-fence" {
				t.Errorf("after the disproved power-off the chain did not escalate to self-fence: %v", trace(nf))
			}
		}
	}
	if disproved == nil || disproved.Method != nf.Spec.Methods[0].Name {
		t.Fatalf("no step of method %s failed with %s: %v", nf.Spec.Methods[0].Name, v1alpha1.ReasonNodeAliveAfterFence, trace(nf))
	}
	t.Logf("disproved: %s", disproved.Message)
	for _, s := range nf.Status.Steps {
		if slices.Contains([]v1alpha1.StepName{v1alpha1.StepTaint, v1alpha1.StepDeletePods, v1alpha1.StepReleaseAttachments}, s.Name) {
			t.Errorf("release step %s taken on a node that was alive: %v", s.Name, trace(nf))
		}
	}
	if st, _, _ := condition(nf, v1alpha1.ConditionReleased); st != "False" {
		t.Errorf("Released condition = %q, want False", st)
	}
	if !hasEvent(eventsFor(t, env, "Node", n1.Name()), v1alpha1.ReasonNodeAliveAfterFence) {
		t.Errorf("no %s event on node %s", v1alpha1.ReasonNodeAliveAfterFence, n1.Name())
	}
	assertNothingReleased(t, env, w)
	if on, err := n1.BMC.PoweredOn(); err != nil || !on {
		t.Errorf("node 1's own BMC: power on = %t (%v), want on: nothing was meant to reach it", on, err)
	}
}

// Every power method's confirmation is checked against the node's signs of life before
// anything is released, as IPMI's above: Redfish, AWS and vSphere each fence the wrong machine
// (node 1's BMC address names another Redfish service; its providerID another instance, another
// VM), read it
// back off, and see node 1 renew its Lease: the method fails with NodeAliveAfterFence, the
// chain escalates to a self-fence that cannot confirm, and nothing of node 1 is released.
func TestEveryPowerMethodChecksLifeBeforeRelease(t *testing.T) {
	const instance1, instance2 = "i-0a1b2c3d4e5f60711", "i-0a1b2c3d4e5f60722"
	selfFence := v1alpha1.Method{Name: "self-fence", Type: v1alpha1.MethodSelfFence, Timeout: &metav1.Duration{Duration: 8 * time.Second},
		SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 3 * time.Second}}}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (scenario.Options, []*corev1.Secret, func() bool)
	}{
		{"redfish", func(t *testing.T) (scenario.Options, []*corev1.Secret, func() bool) {
			own := redfishsim.Start(t, redfishsim.Options{})
			other := redfishsim.Start(t, redfishsim.Options{Username: own.Username(), Password: own.Password()})
			bundle := string(own.CACert()) + string(other.CACert())
			o := scenario.Options{
				Node: func(i int, so *simnode.Options) {
					if i == 1 {
						so.Power = redfishPower{own}
						so.Annotations[v1alpha1.AnnotationBMCAddress] = other.Address() // the wrong BMC
					}
				},
				Policy: func(p *v1alpha1.FencingPolicy) {
					p.Spec.Methods = []v1alpha1.Method{{Name: "redfish", Type: v1alpha1.MethodRedfish, Redfish: &v1alpha1.RedfishMethod{
						CredentialsSecretRef: v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "redfish"},
						CABundleSecretRef:    &v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "redfish-ca"}}}, selfFence}
				},
			}
			secrets := []*corev1.Secret{
				{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "redfish"}, StringData: map[string]string{"username": own.Username(), "password": own.Password()}},
				{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "redfish-ca"}, StringData: map[string]string{redfish.CABundleKey: bundle}},
			}
			return o, secrets, func() bool { return !other.PoweredOn(0) && own.PoweredOn(0) }
		}},
		{"aws", func(t *testing.T) (scenario.Options, []*corev1.Secret, func() bool) {
			ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{instance1, instance2}})
			o := scenario.Options{
				Node: func(i int, so *simnode.Options) {
					if i == 1 {
						so.Power = powerOf(func() bool { return ep.Running(instance1) })
						so.ProviderID = "aws:///us-east-1a/" + instance2 // the wrong instance
					}
				},
				Policy: func(p *v1alpha1.FencingPolicy) {
					p.Spec.Methods = []v1alpha1.Method{{Name: "ec2", Type: v1alpha1.MethodAWS, AWS: &v1alpha1.AWSMethod{Endpoint: ep.URL(),
						CredentialsSecretRef: &v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "aws"}}}, selfFence}
				},
			}
			secrets := []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "aws"},
				StringData: map[string]string{aws.KeyAccessKeyID: ep.AccessKeyID(), aws.KeySecretAccessKey: ep.SecretAccessKey()}}}
			return o, secrets, func() bool { return ep.State(instance2) == "stopped" && ep.Running(instance1) }
		}},
		{"vsphere", func(t *testing.T) (scenario.Options, []*corev1.Secret, func() bool) {
			model := simulator.VPX()
			if err := model.Create(); err != nil {
				t.Fatal(err)
			}
			model.Service.TLS = new(tls.Config)
			srv := model.Service.NewServer()
			t.Cleanup(func() { srv.Close(); model.Remove() })
			vms := model.Map().All("VirtualMachine")
			own, other := vms[0].(*simulator.VirtualMachine), vms[1].(*simulator.VirtualMachine)
			lockCtx := simulator.NewContext()
			on := func(vm *simulator.VirtualMachine) (on bool) {
				model.Map().WithLock(lockCtx, vm.Reference(), func() { on = vm.Runtime.PowerState == vimtypes.VirtualMachinePowerStatePoweredOn })
				return on
			}
			o := scenario.Options{
				Node: func(i int, so *simnode.Options) {
					if i == 1 {
						so.Power = powerOf(func() bool { return on(own) })
						so.ProviderID = "vsphere://" + other.Config.Uuid // the wrong VM
					}
				},
				Policy: func(p *v1alpha1.FencingPolicy) {
					p.Spec.Methods = []v1alpha1.Method{{Name: "vsphere", Type: v1alpha1.MethodVSphere, VSphere: &v1alpha1.VSphereMethod{Server: srv.URL.Host,
						CredentialsSecretRef: v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "vc"},
						CABundleSecretRef:    &v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "vc-ca"}}}, selfFence}
				},
			}
			secrets := []*corev1.Secret{
				{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "vc"}, StringData: map[string]string{"username": "fencer", "password": "vc-pw"}},
				{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "vc-ca"},
					StringData: map[string]string{power.CABundleKey: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))}},
			}
			return o, secrets, func() bool { return !on(other) && on(own) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, secrets, wrongOneOff := tc.setup(t)
			env := startScene(t, o)
			for _, s := range secrets {
				if err := env.Cluster.Client.Create(context.Background(), s); err != nil {
					t.Fatal(err)
				}
			}
			startController(t, env)
			w := deploy(t, env)
			n1 := env.Node(1)
			patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: fence node 1 through the wrong machine"})
			nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, phaseIs(v1alpha1.PhaseFailed))
			t.Logf("trace: %v", trace(nf))
			if !wrongOneOff() {
				t.Fatal("the wrong machine was not turned off, or node 1's was: the test did not test")
			}
			disproved := false
			for i, s := range nf.Status.Steps {
				if s.State == v1alpha1.StepFailed && s.Reason == v1alpha1.ReasonNodeAliveAfterFence && s.Method == nf.Spec.Methods[0].Name {
					disproved = true
					if rest := nf.Status.Steps[i+1:]; len(rest) == 0 || rest[0].Method != "self-fence" {
						t.Errorf("after the disproved power-off the chain did not escalate to self-fence: %v", trace(nf))
					}
				}
			}
			if !disproved {
				t.Fatalf("no step of method %s failed with %s: %v", nf.Spec.Methods[0].Name, v1alpha1.ReasonNodeAliveAfterFence, trace(nf))
			}
			for _, s := range nf.Status.Steps {
				if slices.Contains([]v1alpha1.StepName{v1alpha1.StepTaint, v1alpha1.StepDeletePods, v1alpha1.StepReleaseAttachments}, s.Name) {
					t.Errorf("release step %s taken on a node that was alive: %v", s.Name, trace(nf))
				}
			}
			assertNothingReleased(t, env, w)
		})
	}
}

// powerOf is a simulated node's power supply read from a function.
type powerOf func() bool

func (p powerOf) PoweredOn() (bool, error) { return p(), nil }

// A power-off that reached another machine while the node was cut off from the control plane:
// the verify window cannot see the node, so its pods are released (the price of a wrong BMC
// address with a partition on top). When the node comes back it posts its status with the boot
// ID it had when fenced, which a machine that lost power cannot do: its NodeFence says
// PowerOffDisproved (not the routine BootIDUnchanged), with a Warning on the Node, and the node
// stays tainted. As above, node 1's identity check is turned off, so that the power-off can
// reach the other machine.
func TestPowerOffDisprovedWhenTheNodeComesBack(t *testing.T) {
	env := startScene(t, scenario.Options{})
	startController(t, env)
	n1, n3 := env.Node(1), env.Node(3)
	boot := n1.BootID()
	n1.PauseHeartbeats()
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationBMCAddress: n3.BMC.Address(), v1alpha1.AnnotationBMCIdentityCheck: "false"})
	patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: fence node 1 through a swapped BMC address while it is cut off"})
	nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, fenceEnded)
	if nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("the fence ended %s, want Released (the window cannot see a cut-off node): %v", nf.Status.Phase, trace(nf))
	}
	if on, err := n3.BMC.PoweredOn(); err != nil || on {
		t.Fatalf("node 3's power on = %t (%v): the swapped address did not power off the other machine, the test did not test", on, err)
	}
	released := nf.Status.ReleasedTime

	// Back: once its Ready is no longer what it posted before (node lifecycle marked it), or its
	// last post is older than the simulated kubelet's report interval, it posts again.
	ctx := context.Background()
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 70*time.Second, true, func(ctx context.Context) (bool, error) {
		node := &corev1.Node{}
		if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: n1.Name()}, node); err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status != corev1.ConditionTrue || time.Since(c.LastHeartbeatTime.Time) > time.Minute, nil
			}
		}
		return false, nil
	})
	// Recovery counts a status as posted after the power-off only 30 s after it (the kubelet's
	// clock may run ahead of the controller's): come back later than that.
	time.Sleep(time.Until(nf.Status.FencedTime.Add(35 * time.Second)))
	n1.ResumeHeartbeats()
	nf = waitFence(t, env.Cluster, n1.Name(), 90*time.Second, func(nf *v1alpha1.NodeFence) bool {
		_, reason, _ := condition(nf, v1alpha1.ConditionRecovered)
		return reason == "PowerOffDisproved" || nf.Status.Phase == v1alpha1.PhaseRecovered
	})
	st, reason, msg := condition(nf, v1alpha1.ConditionRecovered)
	t.Logf("released %s; Recovered=%s (%s): %s", released, st, reason, msg)
	if nf.Status.Phase != v1alpha1.PhaseReleased || st != "False" || !strings.Contains(msg, "never lost power") || !strings.Contains(msg, boot) {
		t.Errorf("phase %s, Recovered=%s (%s): %s; want Released and held as PowerOffDisproved naming boot ID %s", nf.Status.Phase, st, reason, msg, boot)
	}
	node := &corev1.Node{}
	if err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: n1.Name()}, node); err != nil {
		t.Fatal(err)
	}
	if !fencing.OutOfService(node) {
		t.Errorf("node 1 lost its out-of-service taint while it runs its released workload: %v", node.Spec.Taints)
	}
	if !hasEvent(eventsFor(t, env, "Node", n1.Name()), "PowerOffDisproved") {
		t.Errorf("no PowerOffDisproved event on node %s: %v", n1.Name(), eventsFor(t, env, "Node", n1.Name()))
	}
}
