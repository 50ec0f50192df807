package checker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/witness"
)

// On the real API server's audit log: a Node tainted out-of-service and its pod marked Failed
// and force-deleted with no fence are releases before a confirmed fence; the same after a NodeFence whose Fenced
// condition turned True are not.
func TestNoEarlyReleaseReadsTheAPIServersAuditLog(t *testing.T) {
	ctx := context.Background()
	c, err := testbed.Start(ctx, testbed.Options{AuditLog: true, NoCSIAttacher: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	uids := map[string]string{}
	for _, n := range []string{"bare", "fenced"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := c.Client.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db-" + n},
			Spec: corev1.PodSpec{NodeName: n, Containers: []corev1.Container{{Name: "db", Image: "db"}}}}
		if err := c.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		uids[n] = string(pod.UID)
	}
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "fenced"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "fenced", Trigger: v1alpha1.TriggerManual,
		Methods: []v1alpha1.Method{{Name: "ipmi", Type: v1alpha1.MethodIPMI,
			IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "default", Name: "bmc"}}}}}}
	if err := c.Client.Create(ctx, nf); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&nf.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionFenced, Status: metav1.ConditionTrue, Reason: "PowerOff", Message: "test"})
	nf.Status.Phase = v1alpha1.PhaseFenced
	if err := c.Client.Status().Update(ctx, nf); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"bare", "fenced"} {
		// A pod released as Palisade releases it, marked Failed, then force-deleted; the taint
		// after it, so that the taint manager's eviction does not race the two.
		pod := &corev1.Pod{}
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "db-" + n}, pod); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Status.Phase = corev1.PodFailed
		if err := c.Client.Status().Patch(ctx, pod, patch); err != nil {
			t.Fatal(err)
		}
		if err := c.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		node := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: n}, node); err != nil {
			t.Fatal(err)
		}
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "node.kubernetes.io/out-of-service", Effect: corev1.TaintEffectNoExecute})
		if err := c.Client.Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // the audit backend writes as it goes; give it a moment
	evs, err := checker.ReadAudit(c.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	v := checker.NoEarlyRelease(evs, nil)
	t.Logf("%d audit events; %s", len(evs), checker.Report(v))
	if len(v) != 3 || !contains(v[0].Text, "marked Failed") || !contains(v[1].Text, "force-deleted") || !contains(v[2].Text, "taint") {
		t.Fatalf("want 3 violations (the Failed mark, the force deletion and the taint of node bare), got %d", len(v))
	}
	for _, x := range v {
		if !contains(x.Text, "node bare") {
			t.Errorf("violation of another node: %s", x)
		}
	}

	// The same log read for the copies' side: db-fenced's copy wrote after its release (2 s
	// after the last event, past the 1 s for writes in flight), db-bare's stopped before it.
	deleted := evs[len(evs)-1].StageTimestamp
	rec := func(node string, at time.Duration) witness.Record {
		return witness.Record{Kind: witness.KindAppend, Session: node, Arrival: deleted.Add(at),
			Identity: witness.Identity{Pod: "db-" + node, PodUID: uids[node], Node: node}}
	}
	h := []witness.Record{rec("bare", -time.Second), rec("fenced", -time.Second), rec("fenced", 2*time.Second)}
	w := checker.NoWriteAfterRemoval(h, evs, time.Second)
	t.Logf("%s", checker.Report(w))
	if len(w) != 1 || !contains(w[0].Text, "db-fenced") || !contains(w[0].Text, uids["fenced"]) {
		t.Errorf("NoWriteAfterRemoval on the real audit log = %v, want one violation naming db-fenced (UID %s)", w, uids["fenced"])
	}
}

// On the real API server's audit log: Node status writes are recorded (the audit policy's
// nodes/status), so that check (f) sees each node's boot ID and readiness. Two nodes report boot
// b1 and are fenced and released; one reports boot b2 before its taint goes, the other comes back
// with b1: only the latter's unfence is a violation.
func TestCleanUnfenceReadsNodeStatusFromTheAuditLog(t *testing.T) {
	ctx := context.Background()
	// No node lifecycle controller: it would taint the nodes whose Ready the test writes, and
	// race its writes.
	c, err := testbed.Start(ctx, testbed.Options{AuditLog: true, NoCSIAttacher: true, Logf: t.Logf,
		Controllers: []string{"garbage-collector-controller", "serviceaccount-token-controller"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	status := func(name, boot string, ready corev1.ConditionStatus) {
		t.Helper()
		node := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			t.Fatal(err)
		}
		node.Status.NodeInfo.BootID = boot
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "Test"}}
		if err := c.Client.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	taints := func(name string, taints []corev1.Taint) {
		t.Helper()
		node := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			t.Fatal(err)
		}
		node.Spec.Taints = taints
		if err := c.Client.Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"rebooted", "same"} {
		if err := c.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
		status(n, "b1", corev1.ConditionTrue)
		nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: n}, Spec: v1alpha1.NodeFenceSpec{NodeName: n, Trigger: v1alpha1.TriggerManual,
			Methods: []v1alpha1.Method{{Name: "ipmi", Type: v1alpha1.MethodIPMI,
				IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "default", Name: "bmc"}}}}}}
		if err := c.Client.Create(ctx, nf); err != nil {
			t.Fatal(err)
		}
		status(n, "b1", corev1.ConditionUnknown)
		taints(n, []corev1.Taint{{Key: "node.kubernetes.io/out-of-service", Effect: corev1.TaintEffectNoExecute}})
		meta.SetStatusCondition(&nf.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionFenced, Status: metav1.ConditionTrue, Reason: "PowerOff", Message: "test"})
		nf.Status.Phase = v1alpha1.PhaseReleased
		if err := c.Client.Status().Update(ctx, nf); err != nil {
			t.Fatal(err)
		}
	}
	status("rebooted", "b2", corev1.ConditionTrue)
	status("same", "b1", corev1.ConditionTrue)
	taints("rebooted", nil)
	taints("same", nil)
	time.Sleep(500 * time.Millisecond) // the audit backend writes as it goes; give it a moment
	evs, err := checker.ReadAudit(c.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	v := checker.CleanUnfence(evs)
	t.Logf("%d audit events; %s", len(evs), checker.Report(v))
	if len(v) != 1 || !contains(v[0].Text, "node same") || !contains(v[0].Text, "had not rebooted") {
		t.Fatalf("want one violation, node same's unfence without a reboot; got %s", checker.Report(v))
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
