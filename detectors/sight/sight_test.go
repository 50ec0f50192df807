package sight

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"palisade.dev/palisade/detectors/lease"
)

// clock is a fake wall and monotonic clock.
type clock struct {
	wall time.Time
	mon  time.Duration
}

func (c *clock) advance(d time.Duration) { c.wall, c.mon = c.wall.Add(d), c.mon+d }

func newClient(t *testing.T, f interceptor.Funcs) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(s).Build(), f)
}

// frozen is a cache that shows the canary as it was first read, whatever is written since.
type frozen struct {
	client.Reader
	seen *coordinationv1.Lease
}

func (f *frozen) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if f.seen == nil {
		if err := f.Reader.Get(ctx, key, obj, opts...); err != nil {
			return err
		}
		f.seen = obj.(*coordinationv1.Lease).DeepCopy()
		return nil
	}
	f.seen.DeepCopyInto(obj.(*coordinationv1.Lease))
	return nil
}

type view struct {
	Blind bool
	Cause Cause
	Since time.Duration // after the start
	Seen  bool          // seen since the start
}

func TestTracker(t *testing.T) {
	down := errors.New("connection refused")
	tests := []struct {
		name string
		// step runs before round i (from 0) and may break things.
		step func(i int, c *clock, api *error, freeze *bool)
		want []view
	}{
		{"seeing from the first round trip", func(int, *clock, *error, *bool) {},
			[]view{{false, Starting, 0, true}, {false, Starting, 0, true}, {false, Starting, 0, true}}},
		{"API unreachable, then back", func(i int, _ *clock, api *error, _ *bool) {
			*api = map[bool]error{true: down}[i == 1 || i == 2]
		}, []view{{false, Starting, 0, true}, {true, APIUnreachable, time.Second, true}, {true, APIUnreachable, time.Second, true}, {false, APIUnreachable, 3 * time.Second, true}}},
		{"API unreachable from the start: the cause is told, the spell began at the start", func(i int, _ *clock, api *error, _ *bool) {
			*api = map[bool]error{true: down}[i < 2]
		}, []view{{true, APIUnreachable, 0, false}, {true, APIUnreachable, 0, false}, {false, APIUnreachable, 2 * time.Second, true}}},
		{"watch stale: the cache keeps an old value", func(i int, _ *clock, _ *error, freeze *bool) {
			*freeze = i >= 1
		}, []view{{false, Starting, 0, true}, {false, Starting, 0, true}, {false, Starting, 0, true}, {false, Starting, 0, true}, {false, Starting, 0, true}, {true, WatchStale, 5 * time.Second, true}}},
		{"wall clock jumps forward", func(i int, c *clock, _ *error, _ *bool) {
			if i == 2 {
				c.wall = c.wall.Add(time.Hour)
			}
		}, []view{{false, Starting, 0, true}, {false, Starting, 0, true}, {false, ClockJumped, time.Hour + 2*time.Second, true}}},
		{"wall clock jumps back: old canary values are still told apart", func(i int, c *clock, _ *error, _ *bool) {
			if i == 2 {
				c.wall = c.wall.Add(-time.Hour)
			}
		}, []view{{false, Starting, 0, true}, {false, Starting, 0, true}, {false, ClockJumped, -time.Hour + 2*time.Second, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var api error
			freeze := false
			c := &clock{wall: time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)}
			start := c.wall
			cl := newClient(t, interceptor.Funcs{
				Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
					if api != nil {
						return api
					}
					return cl.Patch(ctx, obj, p, opts...)
				},
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if api != nil {
						return api
					}
					return cl.Create(ctx, obj, opts...)
				},
			})
			cache := &frozen{Reader: cl}
			tr := New(Options{Client: cl, Cache: readerFunc(func(ctx context.Context, key client.ObjectKey, obj client.Object) error {
				if freeze {
					return cache.Get(ctx, key, obj)
				}
				cache.seen = nil
				return cl.Get(ctx, key, obj)
			}), Now: func() time.Time { return c.wall }, Elapsed: func() time.Duration { return c.mon }})
			tr.lose(Starting, "test start", c.wall)
			var got []view
			for i := range tt.want {
				tt.step(i, c, &api, &freeze)
				tr.Round(t.Context())
				st := tr.Status()
				got = append(got, view{st.Blind, st.Cause, st.Since.Sub(start), st.Seen})
				c.advance(time.Second)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("status after each round (-want +got):\n%s", diff)
			}
		})
	}
}

type readerFunc func(ctx context.Context, key client.ObjectKey, obj client.Object) error

func (f readerFunc) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return f(ctx, key, obj)
}

func (f readerFunc) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not implemented")
}

func TestTrackerWritesTheCanary(t *testing.T) {
	cl := newClient(t, interceptor.Funcs{})
	now := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	tr := New(Options{Client: cl, Cache: cl, Now: func() time.Time { return now }})
	tr.Round(t.Context())
	got := &coordinationv1.Lease{}
	if err := cl.Get(t.Context(), client.ObjectKey{Namespace: lease.Namespace, Name: CanaryName}, got); err != nil {
		t.Fatal(err)
	}
	if want := metav1.NewMicroTime(now); !got.Spec.RenewTime.Equal(&want) {
		t.Errorf("canary renewTime = %v, want %v", got.Spec.RenewTime, want)
	}
	if blind, cause, msg := tr.Blind(); blind {
		t.Errorf("blind after a round trip: %s: %s", cause, msg)
	}
}
