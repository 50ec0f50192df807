package fencing

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"palisade.dev/palisade/attach"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors/observe"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/agent"
	"palisade.dev/palisade/providers/fake"
)

var update = flag.Bool("update", false, "rewrite the golden step traces in testdata/")

type world struct {
	c     client.Client
	power *fake.Provider
	agent *fake.Provider
	r     *NodeFenceReconciler
	now   time.Time
	// tick, when set, runs before every reconcile of run with the record as it stands.
	tick func(nf *v1alpha1.NodeFence)
	// ticks bounds run, in simulated seconds; 0 is 60.
	ticks int
	// reconcileErrors, when set, lets a reconcile fail (a refused write the test injects): the
	// next tick takes the fence again.
	reconcileErrors bool
}

func newWorld(t *testing.T, methods ...string) *world {
	t.Helper()
	s := testScheme(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{v1alpha1.AnnotationBMCAddress: "10.0.0.1"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "db-0", UID: "pod-uid"}, Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va1", UID: "va-uid"}, Spec: storagev1.VolumeAttachmentSpec{NodeName: "n1", Attacher: "x.csi"}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "palisade-system", Name: "bmc"}, Data: map[string][]byte{"username": []byte("u"), "password": []byte("p")}}
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "fence-uid"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "n1", Trigger: v1alpha1.TriggerDetected}}
	for _, m := range methods {
		method := v1alpha1.Method{Name: m, Type: v1alpha1.MethodIPMI, Timeout: &metav1.Duration{Duration: 10 * time.Second},
			IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "bmc"}}}
		if m == "executor" {
			method = v1alpha1.Method{Name: m, Type: v1alpha1.MethodExecutor, Timeout: &metav1.Duration{Duration: 5 * time.Second}}
		}
		if m == "self-fence" {
			method = v1alpha1.Method{Name: m, Type: v1alpha1.MethodSelfFence, Timeout: &metav1.Duration{Duration: 30 * time.Second},
				SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 5 * time.Second}}}
		}
		nf.Spec.Methods = append(nf.Spec.Methods, method)
	}
	c := fakeclient.NewClientBuilder().WithScheme(s).WithObjects(node, pod, va, secret, nf).
		WithStatusSubresource(&v1alpha1.NodeFence{}, &corev1.Pod{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		Build()
	w := &world{c: c, power: fake.New(), agent: fake.NewNamed(agent.Name), now: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	w.agent.SetStatus(&providers.Status{State: providers.Confirmed})
	// n1's agent, last heard an hour ago, fences itself 1 s after its isolation, beating every
	// second: within the self-fence method's safeAfter (5 s) with its 4 intervals.
	armed := heartbeats{"n1": {Node: "n1", Interval: time.Second, Received: w.now.Add(-time.Hour), SelfFenceWithin: time.Second}}
	w.r = &NodeFenceReconciler{Client: c, APIReader: c, Fencers: map[v1alpha1.MethodType]providers.Fencer{
		v1alpha1.MethodIPMI: w.power, v1alpha1.MethodExecutor: w.agent, v1alpha1.MethodSelfFence: agent.NewSelfFence(observe.Observer{Reader: c, Heartbeats: armed}),
	}, Attachments: &attach.Releaser{Reader: c, Writer: c}, Now: func() time.Time { return w.now },
		Tokens: &Tokens{Reader: c, Writer: c, Lease: types.NamespacedName{Namespace: "palisade-system", Name: TokenLeaseName}}}
	return w
}

// run reconciles until the fence ends, and fails the test when w.ticks (default 60) simulated
// seconds pass first.
func (w *world) run(t *testing.T) *v1alpha1.NodeFence {
	t.Helper()
	nf, ended := w.advance(t)
	if !ended {
		t.Fatalf("fence did not end: %+v", nf.Status)
	}
	return nf
}

// advance reconciles until the fence ends (Released or Failed) or w.ticks (default 60)
// simulated seconds pass, and returns the record and whether it ended.
func (w *world) advance(t *testing.T) (*v1alpha1.NodeFence, bool) {
	t.Helper()
	nf := &v1alpha1.NodeFence{}
	ticks := w.ticks
	if ticks == 0 {
		ticks = 60
	}
	for range ticks {
		if w.tick != nil {
			if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
				t.Fatal(err)
			}
			w.tick(nf)
		}
		if _, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err != nil && !w.reconcileErrors {
			t.Fatal(err)
		}
		if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
			t.Fatal(err)
		}
		if nf.Status.Phase == v1alpha1.PhaseReleased || nf.Status.Phase == v1alpha1.PhaseFailed {
			return nf, true
		}
		w.now = w.now.Add(time.Second)
	}
	return nf, false
}

func goldenTrace(nf *v1alpha1.NodeFence) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s\n", nf.Status.Phase)
	for _, s := range nf.Status.Steps {
		fmt.Fprintf(&b, "%-18s %-7s %-9s attempts=%d %s\n", s.Name, s.Method, s.State, s.Attempts, s.Reason)
	}
	for _, c := range nf.Status.Conditions {
		fmt.Fprintf(&b, "condition %s=%s %s\n", c.Type, c.Status, c.Reason)
	}
	return b.String()
}

func TestNodeFenceTraces(t *testing.T) {
	auth := providers.NewError(providers.ReasonAuthFailed, errors.New("RAKP 2 HMAC is invalid"))
	tests := []struct {
		name     string
		methods  []string
		setup    func(*world)
		released bool
	}{
		{"power-off-confirmed", []string{"ipmi"}, func(*world) {}, true},
		{"auth-failure", []string{"ipmi"}, func(w *world) { w.power.InjectError(fake.MethodFence, auth) }, false},
		{"power-still-on", []string{"ipmi"}, func(w *world) { w.power.SetIgnoreFence(true) }, false},
		{"escalation", []string{"ipmi", "backup"}, func(w *world) { w.power.InjectError(fake.MethodFence, auth) }, true},
		{"executor-confirmed", []string{"executor", "ipmi"}, func(*world) {}, true},
		{"executor-failed-escalates", []string{"executor", "ipmi"}, func(w *world) {
			w.agent.SetStatus(&providers.Status{State: providers.Failed, Reason: providers.ReasonExecutorFailed})
		}, true},
		{"executor-never-confirms-escalates", []string{"executor", "ipmi"}, func(w *world) {
			w.agent.SetStatus(&providers.Status{State: providers.InProgress, Reason: providers.ReasonOrderRunning})
		}, true},
		{"self-fence-safe-time", []string{"self-fence"}, func(*world) {}, true},
		{"unreachable-then-ok", []string{"ipmi"}, func(w *world) {
			w.power.InjectError(fake.MethodFence, providers.NewError(providers.ReasonUnreachable, errors.New("no answer")))
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, tt.methods...)
			tt.setup(w)
			nf := w.run(t)
			checkGolden(t, tt.name, goldenTrace(nf))
			checkReleased(t, w, tt.released)
		})
	}
}

// checkReleased asserts the world: taint, pod and attachment gone together, or all untouched.
func checkReleased(t *testing.T, w *world, want bool) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, node); err != nil {
		t.Fatal(err)
	}
	tainted := len(node.Spec.Taints) == 1 && node.Spec.Taints[0].Key == v1alpha1.TaintOutOfService
	podErr := w.c.Get(ctx, client.ObjectKey{Namespace: "db", Name: "db-0"}, &corev1.Pod{})
	vaErr := w.c.Get(ctx, client.ObjectKey{Name: "va1"}, &storagev1.VolumeAttachment{})
	got := []bool{tainted, client.IgnoreNotFound(podErr) == nil && podErr != nil, client.IgnoreNotFound(vaErr) == nil && vaErr != nil}
	for i, what := range []string{"tainted", "pod deleted", "attachment deleted"} {
		if got[i] != want {
			t.Errorf("%s = %t, want %t", what, got[i], want)
		}
	}
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden trace (run with -update to create it): %v", err)
	}
	if string(want) != got {
		t.Errorf("step trace differs from %s:\n--- want\n%s--- got\n%s", path, want, got)
	}
}

// A release step found in a record without a confirmed fence is refused (invariant 1), even
// if the record was written by something else.
func TestReleaseRefusedWithoutConfirmation(t *testing.T) {
	w := newWorld(t, "ipmi")
	ctx := context.Background()
	nf := &v1alpha1.NodeFence{}
	if err := w.c.Get(ctx, client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	nf.Status.Steps = []v1alpha1.Step{
		{Name: v1alpha1.StepPowerOff, Method: "ipmi", State: v1alpha1.StepSucceeded},
		{Name: v1alpha1.StepTaint, Method: "ipmi", State: v1alpha1.StepStarted},
	}
	if err := w.c.Status().Update(ctx, nf); err != nil {
		t.Fatal(err)
	}
	nf = w.run(t)
	checkGolden(t, "release-without-confirmation", goldenTrace(nf))
	checkReleased(t, w, false)
}

// A step whose end cannot be recorded (the status write conflicts, as when the Executor's order
// written on the NodeFence made the reconciler's copy stale) is taken again on the next pass;
// its event is raised once, when its end is recorded.
func TestStepEventOnceItsEndIsRecorded(t *testing.T) {
	w := newWorld(t, "ipmi")
	conflicts := 0
	w.r.Client = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if nf, ok := obj.(*v1alpha1.NodeFence); ok && conflicts == 0 {
				if s := stepOf(nf, v1alpha1.StepPowerOff); s.State == v1alpha1.StepSucceeded { // with ConfirmOff's start
					conflicts++
					return apierrors.NewConflict(schema.GroupResource{Group: "fencing.palisade.dev", Resource: "nodefences"}, nf.Name, errors.New("the object has been modified"))
				}
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	rec := &recorder{}
	w.r.Recorder = rec
	w.reconcileErrors = true
	nf, _ := w.advance(t)
	if conflicts != 1 || nf.Status.Phase != v1alpha1.PhaseReleased {
		t.Fatalf("conflicts %d, phase %s: want one conflict and a released fence", conflicts, nf.Status.Phase)
	}
	succeeded := 0
	for _, e := range rec.recorded() {
		if e.On == "NodeFence/n1" && e.Reason == ReasonStepSucceeded {
			succeeded++
		}
	}
	steps := 0
	for _, s := range nf.Status.Steps {
		if s.State == v1alpha1.StepSucceeded && s.Name != v1alpha1.StepConfirmOff {
			steps++
		}
	}
	if succeeded != steps {
		t.Errorf("%d StepSucceeded events for %d succeeded steps (the conflicting PowerOff said twice?): %v", succeeded, steps, rec.recorded())
	}
}

// A step's end and the next step's start are one write, and so are the last step's end and the
// release, but the record still says Fenced on its own before VerifyFenced starts, and every
// release action (the taint, a force deletion, an attachment's removal) finds its step recorded
// as Started, after a confirmed fence, in the record as last written.
func TestStepEndAndNextStartAreOneWrite(t *testing.T) {
	w := newWorld(t, "ipmi")
	fence := &v1alpha1.NodeFence{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, fence); err != nil {
		t.Fatal(err)
	}
	spec := fence.Spec
	var written []v1alpha1.NodeFenceStatus
	recordAt := func(what string, want v1alpha1.StepName) error {
		if len(written) == 0 {
			return fmt.Errorf("%s before any record was written", what)
		}
		last := &v1alpha1.NodeFence{Spec: spec, Status: written[len(written)-1]}
		if s := lastStep(last); s.Name != want || s.State != v1alpha1.StepStarted || !Confirmed(last) {
			return fmt.Errorf("%s with the record's last step %s %s (a confirmed fence: %t), want %s Started after a confirmed fence",
				what, s.Name, s.State, Confirmed(last), want)
		}
		return nil
	}
	var actionErrs []error
	ic := interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			if nf, ok := obj.(*v1alpha1.NodeFence); ok && err == nil {
				written = append(written, *nf.Status.DeepCopy())
			}
			return err
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Node); ok {
				if err := recordAt("tainted", v1alpha1.StepTaint); err != nil {
					actionErrs = append(actionErrs, err)
				}
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			switch obj.(type) {
			case *corev1.Pod:
				if err := recordAt("pod deleted", v1alpha1.StepDeletePods); err != nil {
					actionErrs = append(actionErrs, err)
				}
			case *storagev1.VolumeAttachment:
				if err := recordAt("attachment deleted", v1alpha1.StepReleaseAttachments); err != nil {
					actionErrs = append(actionErrs, err)
				}
			}
			return c.Delete(ctx, obj, opts...)
		},
	})
	w.r.Client, w.r.Attachments = ic, &attach.Releaser{Reader: ic, Writer: ic}
	nf := w.run(t)
	checkReleased(t, w, true)
	for _, err := range actionErrs {
		t.Error(err)
	}
	var shapes []string
	for _, st := range written {
		shape := string(st.Phase) + ":"
		for _, s := range st.Steps {
			if s.EndTime == nil {
				shape += " " + string(s.Name)
			}
		}
		if len(shapes) == 0 || shapes[len(shapes)-1] != shape {
			shapes = append(shapes, shape)
		}
	}
	// One shape a write (repeated passes of one step left out): which steps are open, in what phase.
	want := []string{
		"Fencing: PowerOff",
		"Fencing: ConfirmOff",
		"Fenced:",
		"Releasing: VerifyFenced",
		"Releasing: Taint",
		"Releasing: DeletePods",
		"Releasing: ReleaseAttachments",
		"Released:",
	}
	if strings.Join(shapes, " | ") != strings.Join(want, " | ") {
		t.Errorf("the record's writes:\n got %s\nwant %s", strings.Join(shapes, " | "), strings.Join(want, " | "))
	}
	// One write for each step's start, and three more: the Fenced record, VerifyFenced's first
	// pass (what it waits for) and the last step's end with the release. 9 here; 14 when every
	// end and every start was a write of its own.
	if n := len(nf.Status.Steps); len(written) > n+3 {
		t.Errorf("%d writes for %d steps, want at most %d", len(written), n, n+3)
	}
}

// A NodeFence that names no method (the CRD refuses one; a record stored before the rule, or
// written around it) fails with a condition that says so, instead of panicking the reconcile
// on every pass; nothing is taken or released.
func TestFenceWithoutMethodsFails(t *testing.T) {
	w := newWorld(t)
	nf := w.run(t)
	c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionFenced)
	if nf.Status.Phase != v1alpha1.PhaseFailed || c == nil || !strings.Contains(c.Message, "names no method") {
		t.Errorf("phase %s, Fenced condition %+v: want Failed saying the fence names no method", nf.Status.Phase, c)
	}
	if len(nf.Status.Steps) != 0 {
		t.Errorf("steps taken: %v", nf.Status.Steps)
	}
	checkReleased(t, w, false)
}

// A NodeFence that names one method twice (the CRD refuses one; a record written around it)
// fails before its first step with a condition that names the method, instead of the planner
// taking the first for the second after every failure, without end (a power-off sent every
// timeout, its steps growing until the record is too big to save); nothing is taken or
// released, and the fence ends.
func TestFenceWithAMethodNamedTwiceFails(t *testing.T) {
	w := newWorld(t, "ipmi", "ipmi")
	w.power.SetStatus(&providers.Status{State: providers.Failed, Message: "BMC refused"}) // every method fails
	nf := w.run(t)
	c := meta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionFenced)
	if nf.Status.Phase != v1alpha1.PhaseFailed || c == nil || !strings.Contains(c.Message, `names method "ipmi" more than once`) {
		t.Errorf("phase %s, Fenced condition %+v: want Failed naming the method named twice", nf.Status.Phase, c)
	}
	if len(nf.Status.Steps) != 0 {
		t.Errorf("steps taken: %v", nf.Status.Steps)
	}
	checkReleased(t, w, false)
}
