package fake

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/providers"
)

var (
	n1 = providers.Target{Node: "n1", Address: "10.0.0.1", Username: "u", Password: "p"}
	n2 = providers.Target{Node: "n2", Address: "10.0.0.2", Username: "u", Password: "p"}
)

type step struct {
	method    string
	target    providers.Target
	wantState providers.PowerState // PowerState only
	wantErr   error
}

func run(t *testing.T, p *Provider, steps []step) {
	t.Helper()
	for i, s := range steps {
		var err error
		switch s.method {
		case MethodPowerOff:
			err = p.PowerOff(context.Background(), s.target)
		case MethodPowerOn:
			err = p.PowerOn(context.Background(), s.target)
		case MethodPowerState:
			var got providers.PowerState
			got, err = p.PowerState(context.Background(), s.target)
			if got != s.wantState {
				t.Errorf("step %d: PowerState(%s) = %s, want %s", i, s.target.Node, got, s.wantState)
			}
		}
		if !errors.Is(err, s.wantErr) {
			t.Errorf("step %d: %s(%s) error = %v, want %v", i, s.method, s.target.Node, err, s.wantErr)
		}
	}
}

type providerTest struct {
	name      string
	setup     func(*Provider)
	steps     []step
	wantPower map[string]providers.PowerState
}

func providerTests() []providerTest {
	boom := providers.NewError(providers.ReasonUnreachable, errors.New("boom"))
	auth := providers.NewError(providers.ReasonAuthFailed, errors.New("bad password"))
	return []providerTest{{
		name: "power off then read back",
		steps: []step{
			{method: MethodPowerState, target: n1, wantState: providers.PowerOn},
			{method: MethodPowerOff, target: n1},
			{method: MethodPowerState, target: n1, wantState: providers.PowerOff},
			{method: MethodPowerOff, target: n1}, // idempotent
			{method: MethodPowerState, target: n2, wantState: providers.PowerOn},
		},
		wantPower: map[string]providers.PowerState{"n1": providers.PowerOff, "n2": providers.PowerOn},
	}, {
		name: "injected errors are used once each, in order",
		setup: func(p *Provider) {
			p.InjectError(MethodPowerOff, boom)
			p.InjectError(MethodPowerOff, nil)
			p.InjectError(MethodPowerOff, auth)
		},
		steps: []step{
			{method: MethodPowerOff, target: n1, wantErr: boom},
			{method: MethodPowerState, target: n1, wantState: providers.PowerOn},
			{method: MethodPowerOff, target: n2},
			{method: MethodPowerOff, target: n1, wantErr: auth},
			{method: MethodPowerOff, target: n1},
		},
		wantPower: map[string]providers.PowerState{"n1": providers.PowerOff, "n2": providers.PowerOff},
	}, {
		name:  "injected PowerState error reads Unknown",
		setup: func(p *Provider) { p.InjectError(MethodPowerState, boom) },
		steps: []step{
			{method: MethodPowerState, target: n1, wantState: providers.PowerUnknown, wantErr: boom},
			{method: MethodPowerState, target: n1, wantState: providers.PowerOn},
		},
		wantPower: map[string]providers.PowerState{"n1": providers.PowerOn},
	}, {
		name:  "lying BMC",
		setup: func(p *Provider) { p.SetIgnoreOff(true) },
		steps: []step{
			{method: MethodPowerOff, target: n1},
			{method: MethodPowerState, target: n1, wantState: providers.PowerOn},
		},
		wantPower: map[string]providers.PowerState{"n1": providers.PowerOn},
	}, {
		name:  "power on after the plug was pulled",
		setup: func(p *Provider) { p.SetPower("n1", providers.PowerOff) },
		steps: []step{
			{method: MethodPowerState, target: n1, wantState: providers.PowerOff},
			{method: MethodPowerOn, target: n1},
			{method: MethodPowerState, target: n1, wantState: providers.PowerOn},
		},
		wantPower: map[string]providers.PowerState{"n1": providers.PowerOn},
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
			gotPower := map[string]providers.PowerState{}
			var wantCalls []Call
			for _, s := range tt.steps {
				gotPower[s.target.Node] = p.Power(s.target.Node)
				wantCalls = append(wantCalls, Call{Method: s.method, Node: s.target.Node})
			}
			if diff := cmp.Diff(tt.wantPower, gotPower); diff != "" {
				t.Errorf("power (-want +got):\n%s", diff)
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
	err := p.PowerOff(ctx, n1)
	if providers.ReasonOf(err) != providers.ReasonUnreachable || !errors.Is(err, context.Canceled) {
		t.Errorf("PowerOff with a canceled context = %v, want %s wrapping context.Canceled", err, providers.ReasonUnreachable)
	}
	if got := p.Power("n1"); got != providers.PowerOn {
		t.Errorf("power = %s, want On", got)
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
	p.InjectError(MethodPowerOn, errors.New("x"))
	_ = p.PowerOff(context.Background(), n1)
	_ = p.PowerOff(context.Background(), n2)
	_, _ = p.PowerState(context.Background(), n1)
	if got := p.CallCount(MethodPowerOff, ""); got != 2 {
		t.Errorf("CallCount(PowerOff, any) = %d, want 2", got)
	}
	if got := p.CallCount(MethodPowerOff, "n2"); got != 1 {
		t.Errorf("CallCount(PowerOff, n2) = %d, want 1", got)
	}
	p.Reset()
	if err := p.PowerOn(context.Background(), n1); err != nil {
		t.Errorf("PowerOn after Reset = %v, want the injected error forgotten", err)
	}
	if diff := cmp.Diff([]Call{{Method: MethodPowerOn, Node: "n1"}}, p.Calls()); diff != "" {
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
				p.InjectError(MethodPowerState, nil)
				_ = p.PowerOff(context.Background(), n1)
				_, _ = p.PowerState(context.Background(), n2)
				p.SetIgnoreOff(j%2 == 0)
				_ = p.Calls()
			}
		}()
	}
	wg.Wait()
	if got := len(p.Calls()); got != 8*50*2 {
		t.Errorf("%d calls recorded, want %d", got, 8*50*2)
	}
}
