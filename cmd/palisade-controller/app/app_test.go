package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/providers/agent/channel"
)

// A negative fence concurrency is refused with an error naming the flag, before anything starts.
func TestNewManagerRefusesNegativeFenceConcurrency(t *testing.T) {
	_, err := NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, Options{FenceConcurrency: -1})
	if err == nil || !strings.Contains(err.Error(), "--fence-concurrency is -1") {
		t.Fatalf("NewManager with FenceConcurrency -1: %v, want an error naming --fence-concurrency", err)
	}
}

// A negative --attachment-force-after is refused, before anything starts: it would remove a
// VolumeAttachment's finalizer at the attacher's first detach error.
func TestNewManagerRefusesNegativeAttachmentForceAfter(t *testing.T) {
	_, err := NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, Options{AttachmentForceAge: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "--attachment-force-after is -1s") {
		t.Fatalf("NewManager with AttachmentForceAge -1s: %v, want an error naming --attachment-force-after", err)
	}
}

// Under leader election the heartbeat server asks the leader Lease before it hands out an order:
// a replica whose Lease another holds withholds it, the holder hands it out; without leader
// election there is no gate.
func TestHeartbeatServerHandsOrdersOnlyWhileLeading(t *testing.T) {
	lease := func(holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "palisade", Name: LeaderElectionID},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	}
	o := Options{LeaderElection: true, leaderNamespace: "palisade", leaderIdentity: "me"}
	for holder, leads := range map[string]bool{"me": true, "other": false} {
		reader := fake.NewClientBuilder().WithObjects(lease(holder)).Build()
		opts := withLeaderGate(channel.ServerOptions{}, reader, o)
		if opts.MayCommand == nil {
			t.Fatal("no gate under leader election")
		}
		err := opts.MayCommand(context.Background())
		if (err == nil) != leads || err != nil && !errors.Is(err, fencing.ErrNotLeading) {
			t.Errorf("Lease held by %q: MayCommand = %v, want leading %t", holder, err, leads)
		}
	}
	if opts := withLeaderGate(channel.ServerOptions{}, fake.NewClientBuilder().Build(), Options{}); opts.MayCommand != nil {
		t.Error("a gate without leader election")
	}
}

// countingCheck counts its checks and answers err.
type countingCheck struct {
	n   int
	err error
}

func (c *countingCheck) Check(context.Context) error { c.n++; return c.err }

// The heartbeat server's leader check reads the Lease once for every heartbeat within ttl of a
// pass, again once the pass is stale (a replica that stood still longer finds it so), and at
// every heartbeat while it is refused.
func TestRecentLeaderCheck(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	inner := &countingCheck{}
	c := newRecentLeaderCheck(inner, 500*time.Millisecond, func() time.Time { return now })
	ctx := context.Background()
	for range 3 {
		if err := c.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if inner.n != 1 {
		t.Errorf("%d reads for three checks within the ttl, want 1", inner.n)
	}
	now = now.Add(time.Second) // stood still past the ttl, or simply later
	inner.err = fencing.ErrNotLeading
	for range 2 {
		if err := c.Check(ctx); !errors.Is(err, fencing.ErrNotLeading) {
			t.Errorf("Check after the ttl, the Lease another's: %v, want the refusal", err)
		}
	}
	if inner.n != 3 {
		t.Errorf("%d reads, want 3: a refusal is not kept", inner.n)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	c.one <- struct{}{} // a check under way
	if err := c.Check(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Check while another runs, its context cancelled: %v, want it to give up", err)
	}
	<-c.one
}
