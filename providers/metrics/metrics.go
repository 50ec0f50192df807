package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"palisade.dev/palisade/providers"
)

// Label names.
const (
	LabelProvider = "provider"
	LabelMethod   = "method"
	LabelReason   = "reason"
)

// Method label values.
const (
	MethodFence = "Fence"
	MethodCheck = "Check"
	MethodEnd   = "End"
	// MethodReleaseVolumes: providers.VolumeReleaser's ReleaseVolumes.
	MethodReleaseVolumes = "ReleaseVolumes"
	// MethodUnfence: providers.Unfencer's Unfence.
	MethodUnfence = "Unfence"
	// MethodRestorePower: providers.PowerRestorer's RestorePower.
	MethodRestorePower = "RestorePower"
	// MethodFenceTarget: providers.TargetNamer's FenceTarget, before a power method's Fence.
	MethodFenceTarget = "FenceTarget"
)

var (
	// duration is how long provider calls take, errors included.
	duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "palisade",
		Subsystem: "provider",
		Name:      "duration_seconds",
		Help:      "Duration of fencing provider calls in seconds, by provider and method.",
		Buckets:   []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60},
	}, []string{LabelProvider, LabelMethod})
	// errorsTotal counts failed provider calls by their providers.Reason.
	errorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "palisade",
		Subsystem: "provider",
		Name:      "errors_total",
		Help:      "Failed fencing provider calls, by provider, method and reason.",
	}, []string{LabelProvider, LabelMethod, LabelReason})
)

// Register adds the provider metrics to r, e.g. controller-runtime's metrics.Registry. Calling
// it again with the same registry does nothing; any other registration error panics, as
// prometheus.MustRegister does.
func Register(r prometheus.Registerer) {
	for _, c := range []prometheus.Collector{duration, errorsTotal} {
		if err := r.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) || already.ExistingCollector != c {
				panic(err)
			}
		}
	}
}

// decorator measures every call of the Fencer it wraps. It does not embed it: a method
// added to the interface must be measured here before it compiles.
type decorator struct {
	p providers.Fencer
}

var (
	_ providers.Fencer         = (*decorator)(nil)
	_ providers.VolumeReleaser = (*decorator)(nil)
	_ providers.Unfencer       = (*decorator)(nil)
	_ providers.PowerRestorer  = (*decorator)(nil)
	_ providers.TargetNamer    = (*decorator)(nil)
)

// Decorate wraps p so that every call is measured. Wrapping an already decorated provider
// returns it unchanged, so calls are never counted twice.
func Decorate(p providers.Fencer) providers.Fencer {
	if _, ok := p.(*decorator); ok {
		return p
	}
	return &decorator{p: p}
}

// Decorated says whether p is measured (wrapped by Decorate).
func Decorated(p providers.Fencer) bool {
	_, ok := p.(*decorator)
	return ok
}

func (d *decorator) Name() string { return d.p.Name() }

func (d *decorator) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	start := time.Now()
	st, err := d.p.Fence(ctx, req)
	d.observe(MethodFence, start, err)
	return st, err
}

func (d *decorator) Check(ctx context.Context, req providers.Request) (providers.Status, error) {
	start := time.Now()
	st, err := d.p.Check(ctx, req)
	d.observe(MethodCheck, start, err)
	return st, err
}

func (d *decorator) End(ctx context.Context, req providers.Request) error {
	start := time.Now()
	err := d.p.End(ctx, req)
	d.observe(MethodEnd, start, err)
	return err
}

// ReleaseVolumes measures the wrapped provider's ReleaseVolumes; a provider without one
// answers an error saying so.
func (d *decorator) ReleaseVolumes(ctx context.Context, req providers.Request) (providers.Status, error) {
	r, ok := d.p.(providers.VolumeReleaser)
	if !ok {
		return providers.Status{}, providers.NewError(providers.ReasonBadTarget, fmt.Errorf("provider %s cannot release volumes", d.p.Name()))
	}
	start := time.Now()
	st, err := r.ReleaseVolumes(ctx, req)
	d.observe(MethodReleaseVolumes, start, err)
	return st, err
}

// Unfence measures the wrapped provider's Unfence; a provider without one answers an error
// saying so.
func (d *decorator) Unfence(ctx context.Context, req providers.Request) (providers.Status, error) {
	u, ok := d.p.(providers.Unfencer)
	if !ok {
		return providers.Status{}, providers.NewError(providers.ReasonBadTarget, fmt.Errorf("provider %s has no fence to lift", d.p.Name()))
	}
	start := time.Now()
	st, err := u.Unfence(ctx, req)
	d.observe(MethodUnfence, start, err)
	return st, err
}

// FenceTarget measures the wrapped provider's FenceTarget; "" for a provider that names no
// machine. A power method's missing or malformed target shows here (BadTarget), before Fence.
func (d *decorator) FenceTarget(ctx context.Context, req providers.Request) (string, error) {
	n, ok := d.p.(providers.TargetNamer)
	if !ok {
		return "", nil
	}
	start := time.Now()
	name, err := n.FenceTarget(ctx, req)
	d.observe(MethodFenceTarget, start, err)
	return name, err
}

// RestorePower measures the wrapped provider's RestorePower; a provider without one answers an
// error saying so.
func (d *decorator) RestorePower(ctx context.Context, req providers.Request) error {
	r, ok := d.p.(providers.PowerRestorer)
	if !ok {
		return providers.NewError(providers.ReasonBadTarget, fmt.Errorf("provider %s cannot power a machine on", d.p.Name()))
	}
	start := time.Now()
	err := r.RestorePower(ctx, req)
	d.observe(MethodRestorePower, start, err)
	return err
}

func (d *decorator) observe(method string, start time.Time, err error) {
	name := d.p.Name()
	duration.WithLabelValues(name, method).Observe(time.Since(start).Seconds())
	if err != nil {
		errorsTotal.WithLabelValues(name, method, string(providers.ReasonOf(err))).Inc()
	}
}
