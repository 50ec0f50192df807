package metrics

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/fake"
)

// samples reads the provider metrics from g: counters by value, histograms by sample count.
func samples(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "palisade_provider_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			key := fmt.Sprintf("%s{%s}", f.GetName(), strings.Join(labels, ","))
			if h := m.GetHistogram(); h != nil {
				got[key] = float64(h.GetSampleCount())
			} else {
				got[key] = m.GetCounter().GetValue()
			}
		}
	}
	return got
}

func newRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	duration.Reset()
	errorsTotal.Reset()
	reg := prometheus.NewRegistry()
	Register(reg)
	Register(reg) // a second call is harmless
	return reg
}

func request(node string) providers.Request {
	return providers.Request{Fence: &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: node}}}
}

func TestDecorate(t *testing.T) {
	target := request("n1")
	unreachable := providers.NewError(providers.ReasonUnreachable, errors.New("no answer"))
	tests := []struct {
		name   string
		inject map[string][]error
		calls  func(p providers.Fencer)
		want   map[string]float64
	}{{
		name: "successful calls are timed, not counted as errors",
		calls: func(p providers.Fencer) {
			_, _ = p.Fence(context.Background(), target)
			_, _ = p.Check(context.Background(), target)
			_, _ = p.Check(context.Background(), target)
			_ = p.End(context.Background(), target)
		},
		want: map[string]float64{
			"palisade_provider_duration_seconds{method=Fence,provider=fake}": 1,
			"palisade_provider_duration_seconds{method=Check,provider=fake}": 2,
			"palisade_provider_duration_seconds{method=End,provider=fake}":   1,
		},
	}, {
		name: "errors are counted by reason; a plain error is Refused",
		inject: map[string][]error{
			fake.MethodFence: {unreachable, unreachable, errors.New("plain")},
			fake.MethodCheck: {providers.NewError(providers.ReasonAuthFailed, errors.New("bad password"))},
		},
		calls: func(p providers.Fencer) {
			for i := 0; i < 4; i++ {
				_, _ = p.Fence(context.Background(), target)
			}
			_, _ = p.Check(context.Background(), target)
		},
		want: map[string]float64{
			"palisade_provider_duration_seconds{method=Fence,provider=fake}":                   4,
			"palisade_provider_duration_seconds{method=Check,provider=fake}":                   1,
			"palisade_provider_errors_total{method=Fence,provider=fake,reason=BMCUnreachable}": 2,
			"palisade_provider_errors_total{method=Fence,provider=fake,reason=BMCRefused}":     1,
			"palisade_provider_errors_total{method=Check,provider=fake,reason=BMCAuthFailed}":  1,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := newRegistry(t)
			f := fake.New()
			for method, errs := range tt.inject {
				for _, err := range errs {
					f.InjectError(method, err)
				}
			}
			p := Decorate(Decorate(f)) // decorating twice measures once
			tt.calls(p)
			if diff := cmp.Diff(tt.want, samples(t, reg)); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecoratePassesThrough(t *testing.T) {
	newRegistry(t)
	f := fake.New()
	f.SetFenced("n1", true)
	injected := errors.New("boom")
	f.InjectError(fake.MethodEnd, injected)
	p := Decorate(f)
	if p.Name() != "fake" {
		t.Errorf("Name() = %q, want fake", p.Name())
	}
	target := request("n1")
	if got, err := p.Check(context.Background(), target); got.State != providers.Confirmed || err != nil {
		t.Errorf("Check = %s, %v; want Confirmed, nil", got.State, err)
	}
	if err := p.End(context.Background(), target); !errors.Is(err, injected) {
		t.Errorf("End error = %v, want the injected error", err)
	}
	want := []fake.Call{{Method: fake.MethodCheck, Node: "n1"}, {Method: fake.MethodEnd, Node: "n1"}}
	if diff := cmp.Diff(want, f.Calls()); diff != "" {
		t.Errorf("calls reaching the provider (-want +got):\n%s", diff)
	}
}

func TestRegisterOnControllerRuntimeRegistry(t *testing.T) {
	duration.Reset()
	errorsTotal.Reset()
	Register(crmetrics.Registry)
	Register(crmetrics.Registry)
	f := fake.New()
	f.InjectError(fake.MethodFence, providers.NewError(providers.ReasonBadTarget, errors.New("no address")))
	_, _ = Decorate(f).Fence(context.Background(), request("n1"))
	want := map[string]float64{
		"palisade_provider_duration_seconds{method=Fence,provider=fake}":              1,
		"palisade_provider_errors_total{method=Fence,provider=fake,reason=BadTarget}": 1,
	}
	if diff := cmp.Diff(want, samples(t, crmetrics.Registry)); diff != "" {
		t.Errorf("metrics on controller-runtime's registry (-want +got):\n%s", diff)
	}
}

func TestRegisterConflictPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "palisade_provider_errors_total", Help: "other"}, []string{"x"}))
	defer func() {
		if recover() == nil {
			t.Error("Register over a different collector of the same name did not panic")
		}
	}()
	Register(reg)
}

// volumes is a provider that also releases volumes.
type volumes struct {
	*fake.Provider
	calls int
	err   error
}

func (v *volumes) ReleaseVolumes(context.Context, providers.Request) (providers.Status, error) {
	v.calls++
	return providers.Status{State: providers.Confirmed}, v.err
}

// TestDecorateReleaseVolumes: ReleaseVolumes reaches a provider that has it, measured under its
// own method label; a provider without it answers an error, and nothing is measured.
func TestDecorateReleaseVolumes(t *testing.T) {
	reg := newRegistry(t)
	v := &volumes{Provider: fake.New(), err: providers.NewError(providers.ReasonCloudAuthFailed, errors.New("no ec2:DetachVolume"))}
	st, err := Decorate(v).(providers.VolumeReleaser).ReleaseVolumes(context.Background(), request("n1"))
	if v.calls != 1 || st.State != providers.Confirmed || !errors.Is(err, v.err) {
		t.Errorf("ReleaseVolumes = %+v, %v after %d calls; want the provider's answer", st, err, v.calls)
	}
	if _, err := Decorate(fake.New()).(providers.VolumeReleaser).ReleaseVolumes(context.Background(), request("n1")); err == nil ||
		!strings.Contains(err.Error(), "cannot release volumes") {
		t.Errorf("ReleaseVolumes of a provider without it: %v, want an error saying so", err)
	}
	want := map[string]float64{
		"palisade_provider_duration_seconds{method=ReleaseVolumes,provider=fake}":                    1,
		"palisade_provider_errors_total{method=ReleaseVolumes,provider=fake,reason=CloudAuthFailed}": 1,
	}
	if diff := cmp.Diff(want, samples(t, reg)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// lifter is a provider whose fence is lifted by Unfence.
type lifter struct {
	*fake.Provider
	calls int
}

func (l *lifter) Unfence(context.Context, providers.Request) (providers.Status, error) {
	l.calls++
	return providers.Status{}, providers.NewError(providers.ReasonStorageRefused, errors.New("array offline"))
}

// TestDecorateUnfence: Unfence reaches a provider that has it, measured under its own method
// label with its error's reason; a provider without it answers an error, and nothing is
// measured.
func TestDecorateUnfence(t *testing.T) {
	reg := newRegistry(t)
	l := &lifter{Provider: fake.New()}
	if _, err := Decorate(l).(providers.Unfencer).Unfence(context.Background(), request("n1")); l.calls != 1 || providers.ReasonOf(err) != providers.ReasonStorageRefused {
		t.Errorf("Unfence = %v after %d calls; want the provider's answer", err, l.calls)
	}
	if _, err := Decorate(fake.New()).(providers.Unfencer).Unfence(context.Background(), request("n1")); err == nil ||
		!strings.Contains(err.Error(), "has no fence to lift") {
		t.Errorf("Unfence of a provider without it: %v, want an error saying so", err)
	}
	want := map[string]float64{
		"palisade_provider_duration_seconds{method=Unfence,provider=fake}":                        1,
		"palisade_provider_errors_total{method=Unfence,provider=fake,reason=StorageFenceRefused}": 1,
	}
	if diff := cmp.Diff(want, samples(t, reg)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestDecorateRestorePower: RestorePower reaches a provider that has it, measured under its own
// method label; a provider without it answers an error saying so.
func TestDecorateRestorePower(t *testing.T) {
	reg := newRegistry(t)
	f := fake.New()
	f.InjectError(fake.MethodRestorePower, providers.NewError(providers.ReasonUnreachable, errors.New("BMC down")))
	if err := Decorate(f).(providers.PowerRestorer).RestorePower(context.Background(), request("n1")); providers.ReasonOf(err) != providers.ReasonUnreachable {
		t.Errorf("RestorePower = %v, want the provider's answer", err)
	}
	if err := Decorate(f).(providers.PowerRestorer).RestorePower(context.Background(), request("n1")); err != nil || f.CallCount(fake.MethodRestorePower, "n1") != 2 {
		t.Errorf("RestorePower = %v after %d calls, want it done on the second", err, f.CallCount(fake.MethodRestorePower, "n1"))
	}
	noPower := struct{ providers.Fencer }{fake.New()} // only the Fencer's methods
	if err := Decorate(noPower).(providers.PowerRestorer).RestorePower(context.Background(), request("n1")); err == nil ||
		!strings.Contains(err.Error(), "cannot power a machine on") {
		t.Errorf("RestorePower of a provider without it: %v, want an error saying so", err)
	}
	want := map[string]float64{
		"palisade_provider_duration_seconds{method=RestorePower,provider=fake}":                   2,
		"palisade_provider_errors_total{method=RestorePower,provider=fake,reason=BMCUnreachable}": 1,
	}
	if diff := cmp.Diff(want, samples(t, reg)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// namer is a provider that names the machine it fences.
type namer struct {
	*fake.Provider
	calls int
}

func (n *namer) FenceTarget(context.Context, providers.Request) (string, error) {
	n.calls++
	return "", providers.NewError(providers.ReasonBadTarget, errors.New("no palisade.dev/bmc-address"))
}

// TestDecorateFenceTarget: FenceTarget reaches a provider that has it, measured under its own
// method label (a power method's missing target shows there, before any Fence); a provider
// without it names no machine, and nothing is measured.
func TestDecorateFenceTarget(t *testing.T) {
	reg := newRegistry(t)
	n := &namer{Provider: fake.New()}
	if _, err := Decorate(n).(providers.TargetNamer).FenceTarget(context.Background(), request("n1")); n.calls != 1 || providers.ReasonOf(err) != providers.ReasonBadTarget {
		t.Errorf("FenceTarget = %v after %d calls; want the provider's answer", err, n.calls)
	}
	if name, err := Decorate(fake.New()).(providers.TargetNamer).FenceTarget(context.Background(), request("n1")); name != "" || err != nil {
		t.Errorf("FenceTarget of a provider without it = %q, %v; want none", name, err)
	}
	want := map[string]float64{
		"palisade_provider_duration_seconds{method=FenceTarget,provider=fake}":              1,
		"palisade_provider_errors_total{method=FenceTarget,provider=fake,reason=BadTarget}": 1,
	}
	if diff := cmp.Diff(want, samples(t, reg)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
