package fake

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// request is a fence of node through a method without settings.
func request(node string) providers.Request {
	return providers.Request{Fence: &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: node}}}
}

var (
	n1 = request("n1")
	n2 = request("n2")
)

type step struct {
	method    string
	target    providers.Request
	wantState providers.State // Check only
	wantErr   error
}

func run(t *testing.T, p *Provider, steps []step) {
	t.Helper()
	for i, s := range steps {
		var err error
		switch s.method {
		case MethodFence:
			_, err = p.Fence(context.Background(), s.target)
		case MethodEnd:
			err = p.End(context.Background(), s.target)
		case MethodCheck:
			var got providers.Status
			got, err = p.Check(context.Background(), s.target)
			if got.State != s.wantState {
				t.Errorf("step %d: Check(%s) = %s, want %s", i, s.target.Node(), got.State, s.wantState)
			}
		}
		if !errors.Is(err, s.wantErr) {
			t.Errorf("step %d: %s(%s) error = %v, want %v", i, s.method, s.target.Node(), err, s.wantErr)
		}
	}
}

type providerTest struct {
	name       string
	setup      func(*Provider)
	steps      []step
	wantFenced map[string]bool
}

func providerTests() []providerTest {
	boom := providers.NewError(providers.ReasonUnreachable, errors.New("boom"))
	auth := providers.NewError(providers.ReasonAuthFailed, errors.New("bad password"))
	failed := &providers.Status{State: providers.Failed, Reason: providers.ReasonExecutorFailed}
	return []providerTest{{
		name: "fence then read back",
		steps: []step{
			{method: MethodCheck, target: n1, wantState: providers.InProgress},
			{method: MethodFence, target: n1},
			{method: MethodCheck, target: n1, wantState: providers.Confirmed},
			{method: MethodFence, target: n1}, // idempotent
			{method: MethodCheck, target: n2, wantState: providers.InProgress},
		},
		wantFenced: map[string]bool{"n1": true, "n2": false},
	}, {
		name: "injected errors are used once each, in order",
		setup: func(p *Provider) {
			p.InjectError(MethodFence, boom)
			p.InjectError(MethodFence, nil)
			p.InjectError(MethodFence, auth)
		},
		steps: []step{
			{method: MethodFence, target: n1, wantErr: boom},
			{method: MethodCheck, target: n1, wantState: providers.InProgress},
			{method: MethodFence, target: n2},
			{method: MethodFence, target: n1, wantErr: auth},
			{method: MethodFence, target: n1},
		},
		wantFenced: map[string]bool{"n1": true, "n2": true},
	}, {
		name:  "injected Check error reads Unknown",
		setup: func(p *Provider) { p.InjectError(MethodCheck, boom) },
		steps: []step{
			{method: MethodCheck, target: n1, wantState: providers.Unknown, wantErr: boom},
			{method: MethodCheck, target: n1, wantState: providers.InProgress},
		},
		wantFenced: map[string]bool{"n1": false},
	}, {
		name:  "lying BMC",
		setup: func(p *Provider) { p.SetIgnoreFence(true) },
		steps: []step{
			{method: MethodFence, target: n1},
			{method: MethodCheck, target: n1, wantState: providers.InProgress},
		},
		wantFenced: map[string]bool{"n1": false},
	}, {
		name:  "fenced after the plug was pulled",
		setup: func(p *Provider) { p.SetFenced("n1", true) },
		steps: []step{
			{method: MethodCheck, target: n1, wantState: providers.Confirmed},
		},
		wantFenced: map[string]bool{"n1": true},
	}, {
		name:  "a pinned status answers once ordered, until the order ends",
		setup: func(p *Provider) { p.SetStatus(failed) },
		steps: []step{
			{method: MethodCheck, target: n1, wantState: providers.InProgress},
			{method: MethodFence, target: n1},
			{method: MethodCheck, target: n1, wantState: providers.Failed},
			{method: MethodEnd, target: n1},
			{method: MethodCheck, target: n1, wantState: providers.InProgress},
		},
		wantFenced: map[string]bool{"n1": true},
	}}
}

func TestProvider(t *testing.T) {
	for _, tt := range providerTests() {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			if tt.setup != nil {
				tt.setup(p)
			}
			run(t, p, tt.steps)
			gotFenced := map[string]bool{}
			var wantCalls []Call
			for _, s := range tt.steps {
				gotFenced[s.target.Node()] = p.Fenced(s.target.Node())
				wantCalls = append(wantCalls, Call{Method: s.method, Node: s.target.Node()})
			}
			if diff := cmp.Diff(tt.wantFenced, gotFenced); diff != "" {
				t.Errorf("fenced (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantCalls, p.Calls()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCanceledContextIsUnreachable(t *testing.T) {
	p := New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Fence(ctx, n1)
	if providers.ReasonOf(err) != providers.ReasonUnreachable || !errors.Is(err, context.Canceled) {
		t.Errorf("Fence with a canceled context = %v, want %s wrapping context.Canceled", err, providers.ReasonUnreachable)
	}
	if p.Fenced("n1") {
		t.Error("fenced, want running")
	}
}

func TestInjectErrorUnknownMethodPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("InjectError(\"Reboot\") did not panic")
		}
	}()
	New().InjectError("Reboot", errors.New("x"))
}

func TestResetAndCounts(t *testing.T) {
	p := New()
	p.InjectError(MethodEnd, errors.New("x"))
	_, _ = p.Fence(context.Background(), n1)
	_, _ = p.Fence(context.Background(), n2)
	_, _ = p.Check(context.Background(), n1)
	if got := p.CallCount(MethodFence, ""); got != 2 {
		t.Errorf("CallCount(Fence, any) = %d, want 2", got)
	}
	if got := p.CallCount(MethodFence, "n2"); got != 1 {
		t.Errorf("CallCount(Fence, n2) = %d, want 1", got)
	}
	p.Reset()
	if err := p.End(context.Background(), n1); err != nil {
		t.Errorf("End after Reset = %v, want the injected error forgotten", err)
	}
	if diff := cmp.Diff([]Call{{Method: MethodEnd, Node: "n1"}}, p.Calls()); diff != "" {
		t.Errorf("calls after Reset (-want +got):\n%s", diff)
	}
	if p.Name() != "fake" {
		t.Errorf("Name() = %q", p.Name())
	}
}

func TestConcurrentUse(t *testing.T) {
	p := New()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				p.InjectError(MethodCheck, nil)
				_, _ = p.Fence(context.Background(), n1)
				_, _ = p.Check(context.Background(), n2)
				p.SetIgnoreFence(j%2 == 0)
				_ = p.Calls()
			}
		}()
	}
	wg.Wait()
	if got := len(p.Calls()); got != 8*50*2 {
		t.Errorf("%d calls recorded, want %d", got, 8*50*2)
	}
}
