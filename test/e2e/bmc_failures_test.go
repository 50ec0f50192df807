package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/scenario"
)

// A BMC that cannot be reached, refuses the password, is another machine's (its system GUID is
// not the node's systemUUID), or still reports power On after the off command: the fence fails
// with a clear reason and nothing is released (invariant 1), and the other machine gets no
// command. Each case asks for a manual fence of node 1, which runs the database pod and holds
// its attachment.
func TestBMCFailuresReleaseNothing(t *testing.T) {
	env := startScene(t, scenario.Options{Policy: func(p *v1alpha1.FencingPolicy) {
		p.Spec.Methods[0].Timeout = &metav1.Duration{Duration: 6 * time.Second}
	}})
	startController(t, env)
	w := deploy(t, env)
	n1 := env.Node(1)
	ctx := context.Background()
	wrong := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: scenario.SecretNamespace, Name: "wrong-password"},
		StringData: map[string]string{"username": "admin", "password": "not-the-password"}}
	if err := env.Cluster.Client.Create(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]any // set on the node for this case
		lie         bool
		wantReason  string
	}{
		{"BMC unreachable", map[string]any{v1alpha1.AnnotationBMCAddress: "127.0.0.1:9"}, false, "BMCUnreachable"},
		{"wrong password", map[string]any{v1alpha1.AnnotationBMCSecret: "wrong-password"}, false, "BMCAuthFailed"},
		{"another machine's BMC", map[string]any{v1alpha1.AnnotationBMCAddress: env.Node(2).BMC.Address()}, false, "BadTarget"},
		{"power still on after the off command", nil, true, "PowerStillOn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := n1.BMC.SetIgnoreOff(tc.lie); err != nil {
				t.Fatal(err)
			}
			patchAnnotations(t, env, n1.Name(), tc.annotations)
			patchAnnotations(t, env, n1.Name(), map[string]any{v1alpha1.AnnotationFenceRequest: "e2e: " + tc.name})
			nf := waitFence(t, env.Cluster, n1.Name(), time.Minute, phaseIs(v1alpha1.PhaseFailed))
			st, reason, msg := condition(nf, v1alpha1.ConditionFenced)
			if st != "False" || reason != tc.wantReason {
				t.Errorf("Fenced condition = %s/%s (%s), want False/%s", st, reason, msg, tc.wantReason)
			}
			if strings.Contains(msg, "not-the-password") || strings.Contains(msg, "secret\"") {
				t.Errorf("a password leaked into the condition: %s", msg)
			}
			if st, _, _ := condition(nf, v1alpha1.ConditionReleased); st != "False" {
				t.Errorf("Released condition = %q, want False", st)
			}
			if !hasEvent(eventsFor(t, env, "NodeFence", nf.Name), "FenceFailed") {
				t.Error("no FenceFailed event on the NodeFence")
			}
			assertNothingReleased(t, env, w)
			if n, err := env.Node(2).BMC.OffCommands(); err != nil || n != 0 {
				t.Errorf("node 2's machine got %d off commands (%v)", n, err)
			}
			t.Logf("failed as expected: %s: %s", reason, msg)
			resetCase(t, env, n1, tc.annotations)
		})
	}
}

// resetCase removes the request and the case's annotations, then the failed NodeFence.
func resetCase(t *testing.T, env *scenario.Env, n *scenario.Node, annotations map[string]any) {
	t.Helper()
	undo := map[string]any{v1alpha1.AnnotationFenceRequest: nil}
	for k := range annotations {
		undo[k] = nil
	}
	if _, ok := annotations[v1alpha1.AnnotationBMCAddress]; ok {
		undo[v1alpha1.AnnotationBMCAddress] = n.BMC.Address()
	}
	patchAnnotations(t, env, n.Name(), undo)
	if err := n.BMC.SetIgnoreOff(false); err != nil {
		t.Fatal(err)
	}
	if err := n.BMC.SetPower(true); err != nil {
		t.Fatal(err)
	}
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n.Name()}}
	if err := env.Cluster.Client.Delete(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
}

func patchAnnotations(t *testing.T, env *scenario.Env, node string, annotations map[string]any) {
	t.Helper()
	if len(annotations) == 0 {
		return
	}
	patch, err := jsonMarshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		t.Fatal(err)
	}
	obj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := env.Cluster.Client.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner("e2e-operator")); err != nil {
		t.Fatal(err)
	}
}
