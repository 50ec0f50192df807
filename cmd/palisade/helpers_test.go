package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/test/testbed"
)

// runAsCLI makes the test binary run as the CLI (main) instead of the tests, for the tests
// that run it as a process: under another name (kubectl-palisade), or from a shell's completion.
const runAsCLI = "PALISADE_CLI_TEST_RUN_MAIN"

// shared is the package's test bed: one real etcd and kube-apiserver for every test that needs
// a cluster, started by the first of them, stopped by TestMain. Tests keep to their own nodes
// and policies (named and labelled after the test).
var shared struct {
	once    sync.Once
	cluster *testbed.Cluster
	err     error
}

func TestMain(m *testing.M) {
	if os.Getenv(runAsCLI) == "1" {
		main()
		return
	}
	code := m.Run()
	if shared.cluster != nil {
		if err := shared.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping test bed:", err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

// testCluster returns the shared test bed: a real API server with Palisade's CRDs, and none of
// the controllers that would act on the tests' nodes (no node lifecycle, no CSI).
func testCluster(t *testing.T) *testbed.Cluster {
	t.Helper()
	shared.once.Do(func() {
		shared.cluster, shared.err = testbed.Start(context.Background(), testbed.Options{
			NoCSIAttacher: true,
			Controllers:   []string{"serviceaccount-token-controller"},
		})
	})
	if shared.err != nil {
		t.Fatalf("starting test bed: %v", shared.err)
	}
	return shared.cluster
}

// result is what one run of the CLI did.
type result struct {
	code        int
	out, errOut string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.out, r.errOut)
}

// runCLI runs the CLI in-process with args, stdin as its input and c as its client.
func runCLI(t *testing.T, c client.Client, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	a := newApp("palisade", strings.NewReader(stdin), &out, &errOut)
	if c != nil {
		a.connect = func(kubeFlags) (client.Client, error) { return c, nil }
	}
	code := a.run(context.Background(), args)
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

// wantContains fails unless text holds every one of wants, whitespace runs (table padding,
// line breaks) counting as one space.
func wantContains(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	flat := strings.Join(strings.Fields(text), " ")
	for _, w := range wants {
		if !strings.Contains(flat, strings.Join(strings.Fields(w), " ")) {
			t.Errorf("%s does not say %q:\n%s", what, w, text)
		}
	}
}

// lastLine is the last non-empty line of text.
func lastLine(text string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return lines[len(lines)-1]
}

// as is a client of the test bed for user (impersonated by the admin).
func as(t *testing.T, cl *testbed.Cluster, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(cl.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: cl.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// grant gives user the rules, cluster-wide, until the test ends.
func grant(t *testing.T, c client.Client, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	name := "palisade-cli-test-" + user
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	create(t, c, role)
	create(t, c, binding)
}

// create creates obj and deletes it when the test ends.
func create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), obj); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting %T %s: %v", obj, obj.GetName(), err)
		}
	})
}

// nodeSpec describes a test node.
type nodeSpec struct {
	name        string
	labels      map[string]string
	annotations map[string]string
	ready       corev1.ConditionStatus // "" for no Ready condition
	bootID      string
	taint       bool // the out-of-service taint
}

// makeNode creates a Node with its status (Ready condition, boot ID).
func makeNode(t *testing.T, c client.Client, s nodeSpec) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: s.labels, Annotations: s.annotations}}
	if s.taint {
		now := metav1.Now()
		n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Value: v1alpha1.TaintOutOfServiceValue, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now}}
	}
	create(t, c, n)
	n.Status.NodeInfo.BootID = s.bootID
	if s.ready != "" {
		beat := metav1.NewTime(time.Now().Add(-5 * time.Second))
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s.ready, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: beat, LastTransitionTime: beat}}
	}
	if err := c.Status().Update(context.Background(), n); err != nil {
		t.Fatalf("writing the status of node %s: %v", s.name, err)
	}
	return n
}

// makeLease creates the node's Lease in kube-node-lease, last renewed age ago.
func makeLease(t *testing.T, c client.Client, node string, age time.Duration) {
	t.Helper()
	create(t, c, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: node},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: time.Now().Add(-age)}},
	})
}

// ipmi is an IPMI method.
func ipmi(name, level string) v1alpha1.Method {
	return v1alpha1.Method{Name: name, Type: v1alpha1.MethodIPMI, Level: level,
		IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "bmc"}}}
}

// executor is an Executor method.
func executor(name, level string) v1alpha1.Method {
	return v1alpha1.Method{Name: name, Type: v1alpha1.MethodExecutor, Level: level}
}

// makePolicy creates a FencingPolicy selecting the nodes with labels sel, then writes status.
func makePolicy(t *testing.T, c client.Client, name string, sel map[string]string, spec func(*v1alpha1.FencingPolicySpec), status *v1alpha1.FencingPolicyStatus) *v1alpha1.FencingPolicy {
	t.Helper()
	p := &v1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.FencingPolicySpec{NodeSelector: metav1.LabelSelector{MatchLabels: sel}, Methods: []v1alpha1.Method{ipmi("ipmi", "")}}}
	if spec != nil {
		spec(&p.Spec)
	}
	create(t, c, p)
	if status != nil {
		p.Status = *status
		if err := c.Status().Update(context.Background(), p); err != nil {
			t.Fatalf("writing the status of policy %s: %v", name, err)
		}
	}
	return p
}

// condition is a condition as the controller writes it.
func condition(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
}

// makeFence creates the NodeFence of node under policy, then writes its status (through the
// status subresource, as the controller does).
func makeFence(t *testing.T, c client.Client, node, policy string, edit func(*v1alpha1.NodeFence)) *v1alpha1.NodeFence {
	t.Helper()
	nf := &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{v1alpha1.LabelNode: node}},
		Spec: v1alpha1.NodeFenceSpec{NodeName: node, PolicyName: policy, Trigger: v1alpha1.TriggerDetected, Verdict: "Dead",
			Reason: "Dead: no signal on any path", Methods: []v1alpha1.Method{ipmi("ipmi", "")}},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhasePending},
	}
	if edit != nil {
		edit(nf)
	}
	status := nf.Status
	create(t, c, nf)
	nf.Status = status
	for i := range nf.Status.Conditions {
		if nf.Status.Conditions[i].LastTransitionTime.IsZero() {
			nf.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	if err := c.Status().Update(context.Background(), nf); err != nil {
		t.Fatalf("writing the status of NodeFence %s: %v", node, err)
	}
	return nf
}

// step is a step of a fence's timeline.
func step(name v1alpha1.StepName, method string, state v1alpha1.StepState, reason, msg string) v1alpha1.Step {
	return v1alpha1.Step{Name: name, Method: method, State: state, Attempts: 1, StartTime: metav1.Now(), Reason: reason, Message: msg}
}

// released sets a fence's record to a released power fence whose node is held for reason.
func released(reason, msg string) func(*v1alpha1.NodeFence) {
	return func(nf *v1alpha1.NodeFence) {
		now := metav1.Now()
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseReleased, Method: "ipmi", Token: 7, BootID: "boot-1",
			FencedTime: &now, ReleasedTime: &now, PodsDeleted: 2, AttachmentsReleased: 1, AttachmentsForced: []string{"csi-held (pv-held)"},
			Steps: []v1alpha1.Step{
				step(v1alpha1.StepPowerOff, "ipmi", v1alpha1.StepSucceeded, "", "power-off command accepted by the BMC"),
				step(v1alpha1.StepConfirmOff, "ipmi", v1alpha1.StepSucceeded, "", "power state Off read back"),
				step(v1alpha1.StepReleaseAttachments, "", v1alpha1.StepSucceeded, "", "1 volume attachments of the node released"),
			},
			Conditions: []metav1.Condition{
				condition(v1alpha1.ConditionFenced, metav1.ConditionTrue, v1alpha1.ReasonPowerOffConfirmed, "power state Off read back"),
				condition(v1alpha1.ConditionReleased, metav1.ConditionTrue, v1alpha1.ReasonReleased, "released"),
			}}
		if reason != "" {
			meta.SetStatusCondition(&nf.Status.Conditions, condition(v1alpha1.ConditionRecovered, metav1.ConditionFalse, reason, msg))
		}
	}
}

// annotations reads node's annotations.
func annotations(t *testing.T, c client.Client, node string) map[string]string {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
		t.Fatalf("reading node %s: %v", node, err)
	}
	return n.Annotations
}

// eventually retries check until it returns nil, for at most a minute.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
