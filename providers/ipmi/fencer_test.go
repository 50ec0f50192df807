package ipmi

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/test/testbed/ipmisim"
)

// The read-back confirms only the machine the off command went to. Node n1's off command goes
// to its BMC, which lies (accepts it, stays on); then n1's address is changed to another
// machine's BMC, one already off. A read-back of that one would confirm a fence of a node
// whose machine still runs: Check fails the method with FenceTargetChanged instead, sends
// nothing to the other BMC, and the recovery's power-on is refused the same way. With the
// address set back, the read-back goes on against the machine that got the command.
//
// The Node and its Secret come from a fake client (the provider only reads them); the BMCs are
// real ipmi_sims reached through the real ipmitool.
func TestReadBackOnlyOfTheMachineTurnedOff(t *testing.T) {
	own, other := startBMC(t), startBMC(t)
	if err := own.SetIgnoreOff(true); err != nil {
		t.Fatal(err)
	}
	if err := other.SetPower(false); err != nil {
		t.Fatal(err)
	}
	c, p, req := fenceScene(t, own, "")
	ctx := context.Background()
	nf := req.Fence

	target, err := p.FenceTarget(ctx, req)
	if err != nil {
		t.Fatalf("FenceTarget: %v", err)
	}
	if !strings.Contains(target, own.Address()) || strings.Contains(target, own.Password()) {
		t.Fatalf("FenceTarget = %q: want the BMC's address %s, and never its password", target, own.Address())
	}
	// What the fence reconciler records before the off command: the fence step, with the
	// machine it acts on.
	nf.Status.Steps = append(nf.Status.Steps, v1alpha1.Step{Name: v1alpha1.StepPowerOff, Method: "ipmi", State: v1alpha1.StepStarted, Target: target})
	if got := req.FencedTarget(); got != target {
		t.Fatalf("FencedTarget = %q, want %q", got, target)
	}
	if _, err := p.Fence(ctx, req); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	nf.Status.Steps[0].State = v1alpha1.StepSucceeded
	nf.Status.Steps = append(nf.Status.Steps, v1alpha1.Step{Name: v1alpha1.StepConfirmOff, Method: "ipmi", State: v1alpha1.StepStarted})
	if st, err := p.Check(ctx, req); err != nil || st.State != providers.InProgress {
		t.Fatalf("Check of the lying BMC = %+v, %v; want InProgress", st, err)
	}

	setAddress(t, c, other.Address())
	offBefore := offCommands(t, other)
	for attempt := int32(1); attempt <= 5; attempt++ { // the 5th would re-send the off command
		req.Attempt = attempt
		st, err := p.Check(ctx, req)
		if providers.ReasonOf(err) != providers.ReasonTargetChanged || providers.IsRetryable(err) {
			t.Fatalf("Check after the address changed = %+v, %v; want the error %s, not retried: the other machine, off, read back as this node's fence",
				st, err, providers.ReasonTargetChanged)
		}
		if !strings.Contains(err.Error(), own.Address()) || !strings.Contains(err.Error(), other.Address()) {
			t.Errorf("the error does not name both machines: %v", err)
		}
	}
	if _, err := p.Fence(ctx, req); providers.ReasonOf(err) != providers.ReasonTargetChanged {
		t.Errorf("Fence after the address changed: %v; want %s", err, providers.ReasonTargetChanged)
	}
	if n := offCommands(t, other); n != offBefore {
		t.Errorf("the other machine got %d off commands", n-offBefore)
	}
	if err := p.RestorePower(ctx, req); providers.ReasonOf(err) != providers.ReasonTargetChanged {
		t.Errorf("RestorePower after the address changed: %v; want %s", err, providers.ReasonTargetChanged)
	}
	if poweredOn(t, other) {
		t.Error("the power-on went to the other machine")
	}

	setAddress(t, c, own.Address())
	req.Attempt = 6
	if st, err := p.Check(ctx, req); err != nil || st.State != providers.InProgress || st.Reason != providers.ReasonPowerStillOn {
		t.Fatalf("Check with the address set back = %+v, %v; want InProgress %s", st, err, providers.ReasonPowerStillOn)
	}
	// A fence recorded before the machine was named (an earlier version's) is read back as before.
	nf.Status.Steps[0].Target = ""
	setAddress(t, c, other.Address())
	if st, err := p.Check(ctx, req); err != nil || st.State != providers.Confirmed {
		t.Fatalf("Check with no recorded target = %+v, %v; want Confirmed from the BMC the node names", st, err)
	}
}

// fenceScene is node n1, whose kubelet reports systemUUID, with its address on b and its
// Secret in a fake client (the provider only reads them), the provider over it, and a request
// to fence n1 through IPMI.
func fenceScene(t *testing.T, b *ipmisim.BMC, systemUUID string) (client.Client, *Provider, providers.Request) {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{v1alpha1.AnnotationBMCAddress: b.Address()}},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{SystemUUID: systemUUID}}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "palisade-system", Name: "bmc"},
		Data: map[string][]byte{"username": []byte(b.Username()), "password": []byte(b.Password())}}
	c := fakeclient.NewClientBuilder().WithScheme(s).WithObjects(node, secret).Build()
	method := v1alpha1.Method{Name: "ipmi", Type: v1alpha1.MethodIPMI,
		IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "bmc"}}}
	nf := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}}
	return c, New(c), providers.Request{Fence: nf, Method: method, Attempt: 1, Now: time.Now()}
}

func setAddress(t *testing.T, c client.Client, addr string) {
	t.Helper()
	setAnnotation(t, c, v1alpha1.AnnotationBMCAddress, addr)
}

// setAnnotation sets one annotation of node n1.
func setAnnotation(t *testing.T, c client.Client, key, value string) {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, n); err != nil {
		t.Fatal(err)
	}
	n.Annotations[key] = value
	if err := c.Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}
