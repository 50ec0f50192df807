package metrics

import (
	"context"
	"errors"
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
	MethodPowerOff   = "PowerOff"
	MethodPowerState = "PowerState"
	MethodPowerOn    = "PowerOn"
)

var (
	// duration is how long provider calls take, errors included.
	duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "palisade",
		Subsystem: "provider",
		Name:      "duration_seconds",
		Help:      "Duration of power-fencing provider calls in seconds, by provider and method.",
		Buckets:   []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60},
	}, []string{LabelProvider, LabelMethod})
	// errorsTotal counts failed provider calls by their providers.Reason.
	errorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "palisade",
		Subsystem: "provider",
		Name:      "errors_total",
		Help:      "Failed power-fencing provider calls, by provider, method and reason.",
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

// decorator measures every call of the PowerFencer it wraps. It does not embed it: a method
// added to the interface must be measured here before it compiles.
type decorator struct {
	p providers.PowerFencer
}

var _ providers.PowerFencer = (*decorator)(nil)

// Decorate wraps p so that every call is measured. Wrapping an already decorated provider
// returns it unchanged, so calls are never counted twice.
func Decorate(p providers.PowerFencer) providers.PowerFencer {
	if _, ok := p.(*decorator); ok {
		return p
	}
	return &decorator{p: p}
}

func (d *decorator) Name() string { return d.p.Name() }

func (d *decorator) PowerOff(ctx context.Context, t providers.Target) error {
	start := time.Now()
	err := d.p.PowerOff(ctx, t)
	d.observe(MethodPowerOff, start, err)
	return err
}

func (d *decorator) PowerState(ctx context.Context, t providers.Target) (providers.PowerState, error) {
	start := time.Now()
	state, err := d.p.PowerState(ctx, t)
	d.observe(MethodPowerState, start, err)
	return state, err
}

func (d *decorator) PowerOn(ctx context.Context, t providers.Target) error {
	start := time.Now()
	err := d.p.PowerOn(ctx, t)
	d.observe(MethodPowerOn, start, err)
	return err
}

func (d *decorator) observe(method string, start time.Time, err error) {
	name := d.p.Name()
	duration.WithLabelValues(name, method).Observe(time.Since(start).Seconds())
	if err != nil {
		errorsTotal.WithLabelValues(name, method, string(providers.ReasonOf(err))).Inc()
	}
}
