package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers/redfish"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed/redfishsim"
	"palisade.dev/palisade/test/testbed/simnode"
)

// redfishPower is system 0 of a Redfish service as a simulated node's power supply.
type redfishPower struct{ svc *redfishsim.Service }

func (p redfishPower) PoweredOn() (bool, error) { return p.svc.PoweredOn(0), nil }

// Redfish fencing on the real control plane: node 1 is powered by a Redfish service over TLS
// (redfishsim, a DMTF-shaped stand-in: see its doc comment) and the policy's only method is
// Redfish with a CA bundle. A wrong password, an untrusted certificate and a BMC that keeps the
// power on after ForceOff each fail the fence with a clear reason, no secret in it, and release
// nothing; then an honest BMC's ForceOff, read back as PowerState Off, releases the node.
func TestRedfishFencing(t *testing.T) {
	const password = "rf-pw-2b9d41"
	svc := redfishsim.Start(t, redfishsim.Options{Password: password})
	stranger := redfishsim.Start(t, redfishsim.Options{Password: password}) // signed by a CA the policy does not trust
	env := startScene(t, scenario.Options{
		Node: func(i int, so *simnode.Options) {
			if i == 1 {
				so.Power = redfishPower{svc}
				so.Annotations[v1alpha1.AnnotationBMCAddress] = svc.Address()
			}
		},
		Policy: func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods = []v1alpha1.Method{{Name: "redfish", Type: v1alpha1.MethodRedfish, Timeout: &metav1.Duration{Duration: 6 * time.Second},
				Redfish: &v1alpha1.RedfishMethod{
					CredentialsSecretRef: v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "redfish"},
					CABundleSecretRef:    &v1alpha1.SecretReference{Namespace: scenario.SecretNamespace, Name: "redfish-ca"}}}}
		},
	})
	ctx := context.Background()
	for name, data := range map[string]map[string]string{
		"redfish":       {"username": svc.Username(), "password": password},
		"redfish-wrong": {"username": svc.Username(), "password": "not-the-password"},
		"redfish-ca":    {redfish.CABundleKey: string(svc.CACert())},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: name}, StringData: data}
		if err := env.Cluster.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	startController(t, env)
	w := deploy(t, env)
	n1 := env.Node(1)
	for _, tc := range []struct {
		name        string
		annotations map[string]any
		lie         bool
		wantReason  string
	}{
		{"wrong password", map[string]any{v1alpha1.AnnotationBMCSecret: "redfish-wrong"}, false, "BMCAuthFailed"},
		{"untrusted certificate", map[string]any{v1alpha1.AnnotationBMCAddress: stranger.Address()}, false, "BMCCertificateUntrusted"},
		{"power still on after ForceOff", nil, true, "PowerStillOn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waitGone(t, env, n1.Name())
			svc.SetIgnoreOff(tc.lie)
			patchAnnotations(t, env, n1.Name(), tc.annotations)
			patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: " + tc.name})
			nf := waitFence(t, env.Cluster, n1.Name(), time.Minute, phaseIs(v1alpha1.PhaseFailed))
			st, reason, msg := condition(nf, v1alpha1.ConditionFenced)
			if st != "False" || reason != tc.wantReason {
				t.Errorf("Fenced condition = %s/%s (%s), want False/%s", st, reason, msg, tc.wantReason)
			}
			if strings.Contains(msg, password) || strings.Contains(msg, "not-the-password") {
				t.Errorf("a password leaked into the condition: %s", msg)
			}
			if st, _, _ := condition(nf, v1alpha1.ConditionReleased); st != "False" {
				t.Errorf("Released condition = %q, want False", st)
			}
			assertNothingReleased(t, env, w)
			if !svc.PoweredOn(0) {
				t.Fatal("node 1's system was powered off")
			}
			t.Logf("failed as expected: %s: %s", reason, msg)
			undo := map[string]any{v1alpha1.AnnotationFenceRequest: nil}
			for k := range tc.annotations {
				undo[k] = nil
			}
			if _, ok := tc.annotations[v1alpha1.AnnotationBMCAddress]; ok {
				undo[v1alpha1.AnnotationBMCAddress] = svc.Address()
			}
			patchAnnotations(t, env, n1.Name(), undo)
			svc.SetIgnoreOff(false)
			if err := env.Cluster.Client.Delete(ctx, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n1.Name()}}); err != nil {
				t.Fatal(err)
			}
		})
	}
	assertNoSecret(t, env, password, "not-the-password")
	if got := stranger.AuthFailures() + len(stranger.Resets(0)); got != 0 || stranger.Sessions() != 0 {
		t.Errorf("the untrusted BMC got credentials or commands (%d auth failures and resets, %d sessions)", got, stranger.Sessions())
	}
	var resetsBefore = len(svc.Resets(0))

	t.Run("confirmed and released", func(t *testing.T) {
		waitGone(t, env, n1.Name())
		patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: redfish"})
		nf := waitFence(t, env.Cluster, n1.Name(), 2*time.Minute, phaseIs(v1alpha1.PhaseReleased))
		if st, reason, msg := condition(nf, v1alpha1.ConditionFenced); st != "True" || reason != v1alpha1.ReasonPowerOffConfirmed {
			t.Errorf("Fenced condition = %s/%s (%s), want True/%s", st, reason, msg, v1alpha1.ReasonPowerOffConfirmed)
		}
		if svc.PoweredOn(0) {
			t.Error("node 1's system is still on")
		}
		if got := svc.Resets(0)[resetsBefore:]; len(got) == 0 || got[0] != "ForceOff" {
			t.Errorf("resets = %v, want ForceOff", got)
		}
		pod := &corev1.Pod{}
		err := env.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(w.Pod), pod)
		if err == nil && pod.UID == w.Pod.UID {
			t.Errorf("the database pod %s still exists after the release", w.Pod.Name)
		}
	})
}

// waitGone waits until the node's NodeFence is deleted.
func waitGone(t *testing.T, env *scenario.Env, node string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		err := env.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: node}, &v1alpha1.NodeFence{})
		if client.IgnoreNotFound(err) == nil && err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("NodeFence %s not deleted in 30s", node)
}
