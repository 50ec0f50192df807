package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// unfence shows why a released node is held, asks, and sets the unfence request only on yes;
// it refuses a node whose fence an unfence request would not end, saying what to do instead.
func TestUnfence(t *testing.T) {
	cl := testCluster(t)
	c := cl.Client
	sel := map[string]string{"palisade-cli-test": "unfence"}
	makePolicy(t, c, "unfence", sel, nil, nil)
	nodes := map[string]corev1.ConditionStatus{"unfence-held": corev1.ConditionTrue, "unfence-no": corev1.ConditionTrue,
		"unfence-notready": corev1.ConditionFalse, "unfence-fencing": corev1.ConditionFalse, "unfence-failed": corev1.ConditionTrue,
		"unfence-recovered": corev1.ConditionTrue, "unfence-dry": corev1.ConditionTrue, "unfence-recovering": corev1.ConditionTrue,
		"unfence-none": corev1.ConditionTrue, "unfence-unjudged": corev1.ConditionTrue, "unfence-moved": corev1.ConditionTrue, "unfence-disproved": corev1.ConditionFalse,
		"unfence-notready-level": corev1.ConditionFalse, "unfence-notready-storage": corev1.ConditionFalse}
	for n, ready := range nodes {
		makeNode(t, c, nodeSpec{name: n, labels: sel, ready: ready, bootID: "boot-1", taint: true})
	}
	held := "node unfence-held is back but has not rebooted since it was fenced (boot ID boot-1)"
	makeFence(t, c, "unfence-held", "unfence", released("BootIDUnchanged", held))
	makeFence(t, c, "unfence-no", "unfence", released("Flapping", "fenced again 5m after it was last unfenced"))
	makeFence(t, c, "unfence-moved", "unfence", released("BootIDUnchanged", "node unfence-moved is back but has not rebooted"))
	makeFence(t, c, "unfence-disproved", "unfence", released("NodeNotBack", "node unfence-disproved is not back (not Ready)"))
	makeFence(t, c, "unfence-notready", "unfence", released("NodeNotBack", "node unfence-notready is not back (not Ready)"))
	// A level of a power-off and a storage fence: status.method names the level's last method,
	// the storage fence, though the power-off cut the power. A storage fence alone did not.
	storage := v1alpha1.Method{Name: "storage", Type: v1alpha1.MethodNetworkFence, Level: "both", NetworkFence: &v1alpha1.NetworkFenceMethod{NetworkFenceClassName: "nfc"}}
	makeFence(t, c, "unfence-notready-level", "unfence", func(nf *v1alpha1.NodeFence) {
		released("NodeNotBack", "node unfence-notready-level is not back (not Ready)")(nf)
		nf.Spec.Methods = []v1alpha1.Method{ipmi("ipmi", "both"), storage}
		nf.Status.Method = "storage"
		nf.Status.Steps = append(nf.Status.Steps[:2:2],
			step(v1alpha1.StepStorageFence, "storage", v1alpha1.StepSucceeded, "", "NetworkFence created"),
			step(v1alpha1.StepConfirmStorageFenced, "storage", v1alpha1.StepSucceeded, "", "NetworkFence Fenced"))
	})
	makeFence(t, c, "unfence-notready-storage", "unfence", func(nf *v1alpha1.NodeFence) {
		released("NodeNotBack", "node unfence-notready-storage is not back (not Ready)")(nf)
		storage.Level = ""
		nf.Spec.Methods = []v1alpha1.Method{storage}
		nf.Status.Method = "storage"
		nf.Status.Steps = []v1alpha1.Step{
			step(v1alpha1.StepStorageFence, "storage", v1alpha1.StepSucceeded, "", "NetworkFence created"),
			step(v1alpha1.StepConfirmStorageFenced, "storage", v1alpha1.StepSucceeded, "", "NetworkFence Fenced")}
	})
	makeFence(t, c, "unfence-fencing", "unfence", func(nf *v1alpha1.NodeFence) {
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Method: "ipmi", Token: 9}
	})
	makeFence(t, c, "unfence-failed", "unfence", func(nf *v1alpha1.NodeFence) {
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFailed, Token: 10}
	})
	makeFence(t, c, "unfence-recovered", "unfence", func(nf *v1alpha1.NodeFence) {
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRecovered, Token: 11, Recovery: &v1alpha1.RecoveryRecord{
			How: v1alpha1.RecoveryRebooted, Time: metav1.Now(), Reason: "rebooted: boot ID boot-0 when fenced, boot-1 now"}}
	})
	makeFence(t, c, "unfence-dry", "unfence", func(nf *v1alpha1.NodeFence) { nf.Spec.DryRun = true })
	makeFence(t, c, "unfence-unjudged", "unfence", released("", "")) // released a moment ago
	makeFence(t, c, "unfence-recovering", "unfence", func(nf *v1alpha1.NodeFence) {
		released("", "")(nf)
		nf.Status.Recovery = &v1alpha1.RecoveryRecord{How: v1alpha1.RecoveryRebooted, Time: metav1.Now(), Reason: "rebooted: boot ID boot-1 when fenced, boot-2 now"}
	})

	t.Run("yes", func(t *testing.T) {
		r := runCLI(t, c, "yes\n", "unfence", "unfence-held", "--reason", "reinstalled from scratch")
		if r.code != exitOK {
			t.Fatalf("unfence: %s", r)
		}
		t.Logf("unfence unfence-held:\n%s", r.out)
		wantContains(t, "the explanation", r.out,
			"NodeFence unfence-held: Released (method ipmi, trigger Detected, policy unfence)",
			"Recovered=False BootIDUnchanged: "+held,
			"Node unfence-held: Ready True, boot ID boot-1 (the fence's: boot-1 when the fence began)",
			"Palisade unfences a node that is back (Ready) and rebooted since its fence by itself",
			"This confirmation is for a node that did not reboot, whose reboot is not proven (after a fence that kept the machine on, its agent must heartbeat from the new boot too), that Palisade holds as Flapping, or whose policy unfences only on request",
			"Unfence node unfence-held? [y/N] ",
			`unfence requested: node unfence-held carries palisade.dev/unfence-request="reinstalled from scratch"`)
		if strings.Contains(r.out, "is not Ready") {
			t.Errorf("a Ready node is said not Ready:\n%s", r.out)
		}
		if got := annotations(t, c, "unfence-held")[v1alpha1.AnnotationUnfenceRequest]; got != "reinstalled from scratch" {
			t.Errorf("unfence request = %q, want the reason", got)
		}
	})

	t.Run("no", func(t *testing.T) {
		r := runCLI(t, c, "N\n", "unfence", "unfence-no", "--reason", "checked by hand")
		if r.code != exitError {
			t.Fatalf("unfence answered no: %s", r)
		}
		wantContains(t, "the output", r.out, "Recovered=False Flapping: fenced again 5m after it was last unfenced")
		wantContains(t, "the refusal", r.errOut, "node unfence-no stays fenced: not confirmed")
		if _, ok := annotations(t, c, "unfence-no")[v1alpha1.AnnotationUnfenceRequest]; ok {
			t.Error("the node carries an unfence request after the answer no")
		}
	})

	// The question waited while the fence moved on: Palisade recovered the node (it rebooted),
	// or the node came back in the boot it had when fenced (its power-off disproved). The answer
	// was for the fence shown, and sets nothing.
	for _, tc := range []struct {
		node   string
		change func(nf *v1alpha1.NodeFence)
		want   string
	}{
		{"unfence-moved", func(nf *v1alpha1.NodeFence) {
			nf.Status.Phase = v1alpha1.PhaseRecovered
			nf.Status.Recovery = &v1alpha1.RecoveryRecord{How: v1alpha1.RecoveryRebooted, Time: metav1.Now(), Reason: "rebooted: boot ID boot-1 when fenced, boot-2 now"}
		}, "the NodeFence of node unfence-moved went from Released to Recovered while you answered: nothing was set"},
		{"unfence-disproved", func(nf *v1alpha1.NodeFence) {
			now := metav1.Now()
			nf.Status.PowerOffDisprovedTime = &now
			meta.SetStatusCondition(&nf.Status.Conditions, condition(v1alpha1.ConditionRecovered, metav1.ConditionFalse, "PowerOffDisproved", "the machine never lost power"))
		}, "node unfence-disproved came back with the boot ID it had when fenced while you answered: its power-off did not happen (PowerOffDisproved)"},
	} {
		t.Run("refuses an answer for a fence that moved on: "+tc.node, func(t *testing.T) {
			var out, errOut bytes.Buffer
			in := &answerAfter{answer: "y\n", before: func() {
				nf := &v1alpha1.NodeFence{}
				if err := c.Get(context.Background(), client.ObjectKey{Name: tc.node}, nf); err != nil {
					t.Error(err)
					return
				}
				tc.change(nf)
				if err := c.Status().Update(context.Background(), nf); err != nil {
					t.Error(err)
				}
			}}
			a := newApp("palisade", in, &out, &errOut)
			a.connect = func(kubeFlags) (client.Client, error) { return c, nil }
			if code := a.run(context.Background(), []string{"unfence", tc.node, "--reason", "checked by hand"}); code != exitError {
				t.Fatalf("unfence answered after the fence moved on: exit %d\n%s\n%s", code, out.String(), errOut.String())
			}
			wantContains(t, "the refusal", errOut.String(), tc.want)
			if _, ok := annotations(t, c, tc.node)[v1alpha1.AnnotationUnfenceRequest]; ok {
				t.Error("the node carries an unfence request given for a fence that had moved on")
			}
		})
	}

	for _, node := range []string{"unfence-notready", "unfence-notready-level"} {
		t.Run("not ready "+node, func(t *testing.T) {
			r := runCLI(t, c, "", "unfence", node, "--reason", "checked by hand", "-y")
			if r.code != exitOK {
				t.Fatalf("unfence -y: %s", r)
			}
			wantContains(t, "the note", r.out, "Note: "+node+" is not Ready: Palisade unfences it only once it is Ready again",
				"If it comes back with the boot ID it had when fenced (boot-1), its power-off by method ipmi did not happen: this confirmation is then removed (PowerOffDisproved).")
		})
	}
	t.Run("not ready, a storage fence alone", func(t *testing.T) {
		r := runCLI(t, c, "", "unfence", "unfence-notready-storage", "--reason", "checked by hand", "-y")
		if r.code != exitOK {
			t.Fatalf("unfence -y: %s", r)
		}
		if strings.Contains(r.out, "PowerOffDisproved") {
			t.Errorf("a storage fence's node is warned of a power-off:\n%s", r.out)
		}
	})

	for _, tc := range []struct{ node, want string }{
		{"unfence-none", "node unfence-none has no NodeFence: Palisade has not fenced it, so there is nothing to unfence"},
		{"unfence-missing", "node unfence-missing has no NodeFence"},
		{"unfence-fencing", "node unfence-fencing is still being fenced (NodeFence phase Fencing, method ipmi"},
		{"unfence-failed", "the fence of node unfence-failed failed and released nothing"},
		{"unfence-recovered", "node unfence-recovered is already unfenced: its NodeFence ended Recovered (Rebooted: rebooted: boot ID boot-0 when fenced, boot-1 now)"},
		{"unfence-dry", "the NodeFence of node unfence-dry is a dry run (policy unfence): nothing was fenced"},
		{"unfence-recovering", "Palisade is already unfencing node unfence-recovering (Rebooted"},
		{"unfence-unjudged", "node unfence-unjudged was just released and Palisade has not looked at it since"},
	} {
		t.Run("refuses "+tc.node, func(t *testing.T) {
			r := runCLI(t, c, "y\n", "unfence", tc.node, "--reason", "checked")
			if r.code != exitError {
				t.Fatalf("unfence %s: %s", tc.node, r)
			}
			wantContains(t, "the refusal", r.errOut, tc.want)
			if strings.Contains(r.out, "[y/N]") {
				t.Errorf("unfence %s asked before refusing:\n%s", tc.node, r.out)
			}
			if tc.node != "unfence-missing" {
				if _, ok := annotations(t, c, tc.node)[v1alpha1.AnnotationUnfenceRequest]; ok {
					t.Error("a refused request was set")
				}
			}
		})
	}

	t.Run("refuses a bad reason", func(t *testing.T) {
		r := runCLI(t, c, "y\n", "unfence", "unfence-no", "--reason", "")
		if r.code != exitError {
			t.Fatalf("unfence with an empty reason: %s", r)
		}
		wantContains(t, "the refusal", r.errOut, "--reason is empty: it must say how the node was made clean")
	})
}

// answerAfter is a terminal whose user answers only after before ran (the world changed while
// the question waited).
type answerAfter struct {
	answer string
	before func()
	read   bool
}

func (a *answerAfter) Read(p []byte) (int, error) {
	if a.read {
		return 0, io.EOF
	}
	a.before()
	a.read = true
	return copy(p, a.answer), nil
}
