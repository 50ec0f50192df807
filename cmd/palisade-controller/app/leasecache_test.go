package app

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/test/testbed"
)

// countingMapper counts the REST mappings asked of it.
type countingMapper struct {
	meta.RESTMapper
	n atomic.Int64
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.n.Add(1)
	return m.RESTMapper.RESTMapping(gk, versions...)
}

func (m *countingMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	m.n.Add(1)
	return m.RESTMapper.RESTMappings(gk, versions...)
}

// The manager's cache (cacheOptions) holds the Leases of lease.Namespace and no other, as read
// from the real API server, and serves a Get of one without asking the REST mapper: restricted
// by ByObject.Namespaces it was a multi-namespace cache, which asked at every Get (about 27 µs
// a call, make bench-scale's CPU profile at 5000 nodes). It still returns a copy.
func TestCachedLeaseGetsAskNoRESTMapping(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	renew := metav1.NewMicroTime(time.Now().Truncate(time.Microsecond))
	for _, ns := range []string{lease.Namespace, "default"} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "n1"}, Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}
		if err := c.Client.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	httpClient, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dynamic, err := apiutil.NewDynamicRESTMapper(c.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	mapper := &countingMapper{RESTMapper: dynamic}
	opts := cacheOptions()
	opts.Scheme, opts.Mapper, opts.HTTPClient = scheme, mapper, httpClient
	ca, err := cache.New(c.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	key := client.ObjectKey{Namespace: lease.Namespace, Name: "n1"}
	got := &coordinationv1.Lease{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err = ca.Get(ctx, key, got); err == nil { // the first Get starts the informer
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node Lease through the cache: %v", err)
		}
	}
	before := mapper.n.Load()
	for range 100 {
		got = &coordinationv1.Lease{}
		if err := ca.Get(ctx, key, got); err != nil || got.Spec.RenewTime == nil || !got.Spec.RenewTime.Equal(&renew) {
			t.Fatalf("the node Lease through the cache: %v, renewTime %v; want %v", err, got.Spec.RenewTime, renew)
		}
	}
	if n := mapper.n.Load() - before; n != 0 {
		t.Errorf("100 cached Gets of a node Lease asked the REST mapper %d times, want 0", n)
	}
	got.Spec.RenewTime = nil // a copy: the next Get does not see it
	if again := (&coordinationv1.Lease{}); ca.Get(ctx, key, again) != nil || again.Spec.RenewTime == nil {
		t.Error("changing a Lease a cached Get returned changed the cache's own")
	}
	var all coordinationv1.LeaseList
	if err := ca.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	held := false
	for _, l := range all.Items {
		if l.Namespace != lease.Namespace {
			t.Errorf("the cache holds Lease %s/%s, outside %s", l.Namespace, l.Name, lease.Namespace)
		}
		held = held || l.Name == "n1"
	}
	if !held {
		t.Errorf("the cache's %d Leases leave out %s", len(all.Items), key)
	}
	if err := ca.Get(ctx, client.ObjectKey{Namespace: "default", Name: "n1"}, &coordinationv1.Lease{}); err == nil {
		t.Error("a cached Get of a Lease in namespace default found it; the cache must hold only " + lease.Namespace)
	}
}
