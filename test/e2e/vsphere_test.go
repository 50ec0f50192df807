package e2e

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers/power"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed/simnode"
)

// vSphere fencing on the real control plane against vcsim, govmomi's vCenter simulator, over
// TLS with its own login: node 1 is a VM found by its providerID (vsphere://<BIOS UUID>) and
// runs while the VM is powered on. A VM whose power-off vCenter refuses fails the fence with a
// clear reason and releases nothing; then a power-off read back as poweredOff releases the node.
func TestVSphereFencing(t *testing.T) {
	const password = "vc-pw-81f3"
	model := simulator.VPX()
	if err := model.Create(); err != nil {
		t.Fatal(err)
	}
	model.Service.TLS = new(tls.Config)
	model.Service.Listen = &url.URL{User: url.UserPassword("fencer", password)}
	srv := model.Service.NewServer()
	t.Cleanup(func() { srv.Close(); model.Remove() })
	vm := model.Map().Any("VirtualMachine").(*simulator.VirtualMachine)
	lockCtx := simulator.NewContext() // the test's reads and writes of the VM take its lock, as vcsim's handlers do
	poweredOn := func() bool {
		var on bool
		model.Map().WithLock(lockCtx, vm.Reference(), func() { on = vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn })
		return on
	}
	env := startScene(t, scenario.Options{
		Node: func(i int, so *simnode.Options) {
			if i == 1 {
				so.Power = powerOf(poweredOn)
				so.ProviderID = "vsphere://" + vm.Config.Uuid
			}
		},
		Policy: func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods = []v1alpha1.Method{{Name: "vsphere", Type: v1alpha1.MethodVSphere, Timeout: &metav1.Duration{Duration: 6 * time.Second},
				VSphere: &v1alpha1.VSphereMethod{Server: srv.URL.Host,
					CredentialsSecretRef: v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "vc"},
					CABundleSecretRef:    &v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "vc-ca"}}}}
		},
	})
	ctx := context.Background()
	for name, data := range map[string]map[string]string{
		"vc":    {"username": "fencer", "password": password},
		"vc-ca": {power.CABundleKey: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))},
	} {
		if err := env.Cluster.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: name}, StringData: data}); err != nil {
			t.Fatal(err)
		}
	}
	startController(t, env)
	w := deploy(t, env)
	n1 := env.Node(1)

	t.Run("power-off refused", func(t *testing.T) {
		model.Map().WithLock(lockCtx, vm.Reference(), func() { vm.DisabledMethod = append(vm.DisabledMethod, "PowerOffVMTask") })
		patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: vsphere refused"})
		nf := waitFence(t, env.Cluster, n1.Name(), time.Minute, phaseIs(v1alpha1.PhaseFailed))
		st, reason, msg := condition(nf, v1alpha1.ConditionFenced)
		if st != "False" || (reason != "PowerStillOn" && reason != "CloudRefused") || !strings.Contains(msg, "vsphere") {
			t.Errorf("Fenced condition = %s/%s (%s), want False/PowerStillOn or CloudRefused", st, reason, msg)
		}
		assertNothingReleased(t, env, w)
		if !poweredOn() {
			t.Fatal("the VM was powered off")
		}
		t.Logf("failed as expected: %s: %s", reason, msg)
		patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: nil})
		model.Map().WithLock(lockCtx, vm.Reference(), func() { vm.DisabledMethod = nil })
		if err := env.Cluster.Client.Delete(ctx, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}}); err != nil {
			t.Fatal(err)
		}
	})
	assertNoSecret(t, env, password)
	t.Run("powered off and released", func(t *testing.T) {
		waitGone(t, env, n1.Name())
		patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: vsphere"})
		nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, phaseIs(v1alpha1.PhaseReleased))
		if st, reason, msg := condition(nf, v1alpha1.ConditionFenced); st != "True" || reason != v1alpha1.ReasonPowerOffConfirmed {
			t.Errorf("Fenced condition = %s/%s (%s), want True/%s", st, reason, msg, v1alpha1.ReasonPowerOffConfirmed)
		}
		if poweredOn() {
			t.Error("the VM is still on")
		}
		pod := &corev1.Pod{}
		if err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(w.Pod), pod); err == nil && pod.UID == w.Pod.UID {
			t.Errorf("the database pod %s still exists after the release", w.Pod.Name)
		}
	})
}
