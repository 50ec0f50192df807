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
