package aws_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/test/testbed/ec2sim"
)

// TestForceDetachConfirmedAvailable: the instance's EBS volumes are detached with Force and
// the release is confirmed only once DescribeVolumes lists none attached to it; a volume stuck
// detaching is not detached twice and keeps the release in progress; another instance's volume
// and an available one are left alone, and so is the instance's root volume (without it the
// instance could not start again).
func TestForceDetachConfirmedAvailable(t *testing.T) {
	const other = "i-00000000000000001"
	ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{instance, other},
		Volumes:     map[string]string{"vol-0aaa": instance, "vol-0bbb": instance, "vol-0ccc": other, "vol-0ddd": ""},
		RootVolumes: map[string]string{"vol-0eee": instance}})
	ep.SetStuckDetaching(true)
	s := newScene(t, ep, providerID, "", nil)
	ctx := context.Background()
	st, err := s.p.ReleaseVolumes(ctx, s.req(1, false))
	if err != nil || st.State != providers.InProgress || !strings.Contains(st.Message, "force-detached EBS volumes vol-0aaa, vol-0bbb from instance "+instance) {
		t.Fatalf("ReleaseVolumes = %+v, %v; want InProgress naming both volumes", st, err)
	}
	st, err = s.p.ReleaseVolumes(ctx, s.req(2, false))
	if err != nil || st.State != providers.InProgress || strings.Contains(st.Message, "force-detached") || !strings.Contains(st.Message, "waiting for EBS volumes vol-0aaa, vol-0bbb") {
		t.Fatalf("ReleaseVolumes while detaching = %+v, %v; want InProgress, waiting, nothing sent again", st, err)
	}
	ep.SetStuckDetaching(false)
	st, err = s.p.ReleaseVolumes(ctx, s.req(3, false))
	if err != nil || st.State != providers.Confirmed {
		t.Fatalf("ReleaseVolumes once detached = %+v, %v; want Confirmed", st, err)
	}
	var detached []string
	for _, c := range ep.Calls() {
		if c.Action == "DetachVolume" {
			if !c.Force || !slices.Equal(c.Instances, []string{instance}) {
				t.Errorf("DetachVolume %+v: want Force, from instance %s", c, instance)
			}
			detached = append(detached, c.Volume)
		}
	}
	slices.Sort(detached)
	if !slices.Equal(detached, []string{"vol-0aaa", "vol-0bbb"}) {
		t.Errorf("volumes detached %v, want each of the instance's once", detached)
	}
	for vol, want := range map[string]string{"vol-0aaa": "available", "vol-0bbb": "available", "vol-0ccc": "in-use", "vol-0ddd": "available", "vol-0eee": "in-use"} {
		if got := ep.VolumeState(vol); got != want {
			t.Errorf("volume %s: %s, want %s", vol, got, want)
		}
	}
}

// TestForceDetachRefusedSaysWhy: EC2 refusing the calls (wrong keys) is an error with its
// reason, never a confirmation.
func TestForceDetachRefusedSaysWhy(t *testing.T) {
	ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{instance}, Volumes: map[string]string{"vol-0aaa": instance}})
	s := newScene(t, ep, providerID, "not-the-secret-key", nil)
	st, err := s.p.ReleaseVolumes(context.Background(), s.req(1, false))
	if err == nil || providers.ReasonOf(err) != providers.ReasonCloudAuthFailed || st.State == providers.Confirmed {
		t.Errorf("ReleaseVolumes with wrong keys = %+v, %v; want a CloudAuthFailed error", st, err)
	}
	if ep.VolumeState("vol-0aaa") != "in-use" {
		t.Error("the volume was detached with wrong keys")
	}
}
