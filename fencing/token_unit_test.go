package fencing

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/fake"
)

// tokenSpy is a provider that, whenever a fence is started through it, reads the NodeFence as
// the API holds it: the token the request carries must already be recorded there.
type tokenSpy struct {
	providers.Fencer
	c       client.Client
	carried []int64 // the request's token at each Fence
	stored  []int64 // the recorded token at each Fence
}

func (s *tokenSpy) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	nf := &v1alpha1.NodeFence{}
	if err := s.c.Get(ctx, client.ObjectKey{Name: req.Fence.Name}, nf); err != nil {
		return providers.Status{}, err
	}
	s.carried, s.stored = append(s.carried, req.Fence.Status.Token), append(s.stored, nf.Status.Token)
	return s.Fencer.Fence(ctx, req)
}

// TestTokenRecordedBeforeFirstStep: every fence has its token recorded before its first step is
// taken, a later fence gets a higher one, and the token does not change across the fence's
// methods (an escalation carries the same one).
func TestTokenRecordedBeforeFirstStep(t *testing.T) {
	w := newWorld(t, "ipmi", "executor")
	spy := &tokenSpy{Fencer: w.power, c: w.c}
	w.r.Fencers[v1alpha1.MethodIPMI] = spy
	agentSpy := &tokenSpy{Fencer: w.agent, c: w.c}
	w.r.Fencers[v1alpha1.MethodExecutor] = agentSpy
	w.power.InjectError(fake.MethodFence, providers.NewError(providers.ReasonAuthFailed, errors.New("wrong password"))) // escalates to the executor
	first := w.run(t)
	if first.Status.Token != 1 {
		t.Fatalf("first fence's token %d, want 1", first.Status.Token)
	}
	for name, s := range map[string]*tokenSpy{"ipmi": spy, "executor": agentSpy} {
		if len(s.carried) == 0 {
			t.Fatalf("method %s never taken", name)
		}
		for i := range s.carried {
			if s.carried[i] != 1 || s.stored[i] != 1 {
				t.Errorf("method %s, call %d: request carried token %d, record held %d; want 1 recorded before the step", name, i, s.carried[i], s.stored[i])
			}
		}
	}

	// The fence ends; the node fails again: a new fence, a higher token.
	if err := w.c.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	again := first.DeepCopy()
	again.ResourceVersion, again.Status = "", v1alpha1.NodeFenceStatus{}
	if err := w.c.Create(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	if second := w.run(t); second.Status.Token != 2 {
		t.Errorf("the next fence's token %d, want 2", second.Status.Token)
	}
}

// failingTokens is a token source that cannot hand one out.
type failingTokens struct{}

func (failingTokens) Next(context.Context) (int64, error) {
	return 0, errors.New("advancing the fencing-token Lease: connection refused")
}

// TestNoStepWithoutToken: without a token no step is taken, and the fence says why; once
// tokens come back, the fence goes on.
func TestNoStepWithoutToken(t *testing.T) {
	for name, src := range map[string]TokenSource{"source fails": failingTokens{}, "no source": nil} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, "ipmi")
			tokens := w.r.Tokens
			w.r.Tokens = src
			rec := &recorder{}
			w.r.Recorder = rec
			for range 3 {
				if _, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err == nil {
					t.Fatal("Reconcile without a token: nil error, want one (retried with backoff)")
				}
			}
			nf := &v1alpha1.NodeFence{}
			if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
				t.Fatal(err)
			}
			if len(nf.Status.Steps) != 0 || len(w.power.Calls()) != 0 || nf.Status.Token != 0 {
				t.Fatalf("steps %+v, provider calls %v, token %d: want nothing taken", nf.Status.Steps, w.power.Calls(), nf.Status.Token)
			}
			c := apimeta.FindStatusCondition(nf.Status.Conditions, v1alpha1.ConditionFenced)
			if c == nil || c.Reason != ReasonTokenUnavailable || !strings.Contains(c.Message, "no step is taken without a fencing token") {
				t.Errorf("Fenced condition %+v, want False/%s saying why", c, ReasonTokenUnavailable)
			}
			warned := false
			for _, e := range rec.recorded() {
				warned = warned || e.Reason == ReasonTokenUnavailable
			}
			if !warned {
				t.Errorf("no %s event: %v", ReasonTokenUnavailable, rec.recorded())
			}
			w.r.Tokens = tokens
			if done := w.run(t); done.Status.Phase != v1alpha1.PhaseReleased || done.Status.Token != 1 {
				t.Errorf("once tokens are back: phase %s, token %d; want Released with token 1", done.Status.Phase, done.Status.Token)
			}
		})
	}
}

// With its Lease gone (deleted, a reinstall), the counter starts over above every token a
// NodeFence records: its fence's token and its storage fence's lift token, each sent to agents
// or gateways that refuse a lower one. A counter at the highest int64 cannot go on: an error
// that says what to do, and the Lease is left as it is.
func TestTokenCounterFloorAndCeiling(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "palisade-system", Name: TokenLeaseName}
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"},
		Status: v1alpha1.NodeFenceStatus{Token: 5, LiftToken: 9}}
	c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(nf).WithStatusSubresource(nf).Build()
	tokens := &Tokens{Reader: c, Writer: c, Lease: key}
	if got, err := tokens.Next(ctx); err != nil || got != 10 {
		t.Errorf("first token with the Lease gone = %d (%v), want 10: above the lift token 9", got, err)
	}
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, key, l); err != nil {
		t.Fatal(err)
	}
	l.Annotations[AnnotationLastToken] = strconv.FormatInt(math.MaxInt64, 10)
	if err := c.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	got, err := tokens.Next(ctx)
	if err == nil || !strings.Contains(err.Error(), "the highest token there is") {
		t.Errorf("token past the highest int64 = %d (%v), want an error saying what to do", got, err)
	}
	if err := c.Get(ctx, key, l); err != nil || l.Annotations[AnnotationLastToken] != strconv.FormatInt(math.MaxInt64, 10) {
		t.Errorf("the Lease holds %q (%v), want it left as it was", l.Annotations[AnnotationLastToken], err)
	}
	// The Lease gone, and a NodeFence at the ceiling: no token either.
	if err := c.Delete(ctx, l); err != nil {
		t.Fatal(err)
	}
	nf.Status.LiftToken = math.MaxInt64
	if err := c.Status().Update(ctx, nf); err != nil {
		t.Fatal(err)
	}
	if got, err := tokens.Next(ctx); err == nil || !strings.Contains(err.Error(), "the highest token there is") {
		t.Errorf("token above a NodeFence's highest int64, the Lease gone = %d (%v), want an error saying what to do", got, err)
	}
}
