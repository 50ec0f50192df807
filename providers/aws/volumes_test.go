package aws_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/aws"
	"palisade.dev/palisade/test/testbed/ec2sim"
)

// released is what the release step hands ReleaseVolumes: the volumes of the node's attachments
// being released, as the EBS CSI driver names them.
func released(vols ...string) []providers.Volume {
	var out []providers.Volume
	for _, v := range vols {
		out = append(out, providers.Volume{Attachment: "csi-" + v, Driver: "ebs.csi.aws.com", Handle: v})
	}
	return out
}

// TestForceDetachConfirmedAvailable: the EBS volumes of the node's attachments being released are
// detached from the instance with Force, and the release is confirmed only once DescribeVolumes
// lists none of them attached to it; a volume stuck detaching is not detached twice and keeps
// the release in progress. Every other volume is left alone: the instance's own data volume
// and the volume of a pod that stays on the node (attached, but not among the attachments
// released), the instance's root volume (without it the instance could not start again, even
// if an attachment named it), another instance's volume that an attachment names, and an
// available one.
func TestForceDetachConfirmedAvailable(t *testing.T) {
	const other = "i-00000000000000001"
	ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{instance, other},
		Volumes: map[string]string{"vol-0aaa": instance, "vol-0bbb": instance, "vol-0ccc": other, "vol-0ddd": "",
			"vol-0f00": instance, "vol-0f01": instance},
		RootVolumes: map[string]string{"vol-0eee": instance}})
	ep.SetStuckDetaching(true)
	s := newScene(t, ep, providerID, "", nil)
	ctx := context.Background()
	req := func(attempt int32) providers.Request {
		r := s.req(attempt, false)
		r.Volumes = append(released("vol-0aaa", "vol-0ccc", "vol-0ddd", "vol-0eee"),
			providers.Volume{Attachment: "csi-intree", Driver: "ebs.csi.aws.com", Handle: "vol-0bbb"}, // an in-tree volume, translated (attach.Releaser.Releasing)
			providers.Volume{Attachment: "csi-nfs", Driver: "nfs.csi.k8s.io", Handle: "server/export#vol-0f00"})
		return r
	}
	st, err := s.p.ReleaseVolumes(ctx, req(1))
	if err != nil || st.State != providers.InProgress || !strings.Contains(st.Message, "force-detached EBS volumes vol-0aaa, vol-0bbb from instance "+instance) ||
		!strings.Contains(st.Message, "3 volumes of the instance left attached") {
		t.Fatalf("ReleaseVolumes = %+v, %v; want InProgress naming both volumes, 3 left attached", st, err)
	}
	st, err = s.p.ReleaseVolumes(ctx, req(2))
	if err != nil || st.State != providers.InProgress || strings.Contains(st.Message, "force-detached") || !strings.Contains(st.Message, "waiting for EBS volumes vol-0aaa, vol-0bbb") {
		t.Fatalf("ReleaseVolumes while detaching = %+v, %v; want InProgress, waiting, nothing sent again", st, err)
	}
	ep.SetStuckDetaching(false)
	st, err = s.p.ReleaseVolumes(ctx, req(3))
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
		t.Errorf("volumes detached %v, want each of the released attachments' once", detached)
	}
	for vol, want := range map[string]string{"vol-0aaa": "available", "vol-0bbb": "available", "vol-0ccc": "in-use", "vol-0ddd": "available",
		"vol-0eee": "in-use", "vol-0f00": "in-use", "vol-0f01": "in-use"} {
		if got := ep.VolumeState(vol); got != want {
			t.Errorf("volume %s: %s, want %s", vol, got, want)
		}
	}
}

// TestForceDetachReadsEveryPage: EC2 pages a long DescribeVolumes answer; the volumes on every
// page are looked at, with the instance's filter on each, so a released volume listed on the
// last page is detached too, another instance's is not, the root is kept, and the release is
// confirmed only once no page lists one of them attached. A page answered with the token it was
// asked for (the list could not be read whole) is an error, never a confirmation.
func TestForceDetachReadsEveryPage(t *testing.T) {
	const other = "i-00000000000000001"
	ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{instance, other}, VolumePage: 1,
		Volumes:     map[string]string{"vol-0aaa": instance, "vol-0abb": other, "vol-0bbb": instance, "vol-0ccc": instance},
		RootVolumes: map[string]string{"vol-0eee": instance}})
	s := newScene(t, ep, providerID, "", nil)
	req := s.req(1, false)
	req.Volumes = released("vol-0aaa", "vol-0abb", "vol-0ccc", "vol-0eee")
	st, err := s.p.ReleaseVolumes(context.Background(), req)
	if err != nil || st.State != providers.InProgress || !strings.Contains(st.Message, "force-detached EBS volumes vol-0aaa, vol-0ccc from instance "+instance) ||
		!strings.Contains(st.Message, "2 volumes of the instance left attached") {
		t.Fatalf("ReleaseVolumes = %+v, %v; want InProgress naming the volumes of the first and the third page, 2 left attached", st, err)
	}
	pages := 0
	for _, c := range ep.Calls() {
		if c.Action == "DescribeVolumes" {
			pages++
		}
	}
	if pages != 4 {
		t.Errorf("DescribeVolumes called %d times, want once for each of the instance's 4 pages", pages)
	}
	st, err = s.p.ReleaseVolumes(context.Background(), req)
	if err != nil || st.State != providers.Confirmed {
		t.Fatalf("ReleaseVolumes once detached = %+v, %v; want Confirmed", st, err)
	}
	for vol, want := range map[string]string{"vol-0aaa": "available", "vol-0abb": "in-use", "vol-0bbb": "in-use", "vol-0ccc": "available", "vol-0eee": "in-use"} {
		if got := ep.VolumeState(vol); got != want {
			t.Errorf("volume %s: %s, want %s", vol, got, want)
		}
	}

	t.Run("token answered twice", func(t *testing.T) {
		ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{instance}, VolumePage: 1, RepeatVolumeToken: true,
			Volumes: map[string]string{"vol-0aaa": instance, "vol-0bbb": instance, "vol-0ccc": instance}})
		s := newScene(t, ep, providerID, "", nil)
		req := s.req(1, false)
		req.Volumes = released("vol-0ccc") // on the page never read
		st, err := s.p.ReleaseVolumes(context.Background(), req)
		if err == nil || st.State == providers.Confirmed || !strings.Contains(err.Error(), "twice") {
			t.Fatalf("ReleaseVolumes = %+v, %v; want an error saying the token came twice, not Confirmed", st, err)
		}
		for _, c := range ep.Calls() {
			if c.Action == "DetachVolume" {
				t.Errorf("DetachVolume %+v on a listing not read whole", c)
			}
		}
		if got := ep.VolumeState("vol-0ccc"); got != "in-use" {
			t.Errorf("volume vol-0ccc: %s, want in-use", got)
		}
	})
}

// TestForceDetachNothingReleased: with no attachment being released that names an EBS volume
// (every pod's volume kept, or the node had none), nothing is detached, EC2 is not even asked,
// and the step is confirmed: the instance's volumes, its own data volume among them, stay.
func TestForceDetachNothingReleased(t *testing.T) {
	ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{instance}, Volumes: map[string]string{"vol-0aaa": instance}})
	s := newScene(t, ep, providerID, "", nil)
	for name, vols := range map[string][]providers.Volume{"none": nil,
		"not EBS": {{Attachment: "csi-x", Driver: "rwo.csi.example.com", Handle: "vol-db-0"}, {Attachment: "csi-y"}}} {
		req := s.req(1, false)
		req.Volumes = vols
		st, err := s.p.ReleaseVolumes(context.Background(), req)
		if err != nil || st.State != providers.Confirmed || !strings.Contains(st.Message, "nothing detached") {
			t.Errorf("%s: ReleaseVolumes = %+v, %v; want Confirmed, nothing detached", name, st, err)
		}
	}
	for _, c := range ep.Calls() {
		t.Errorf("EC2 got %s %+v", c.Action, c)
	}
	if got := ep.VolumeState("vol-0aaa"); got != "in-use" {
		t.Errorf("volume vol-0aaa: %s, want in-use", got)
	}
}

// TestForceDetachRefusedSaysWhy: EC2 refusing the calls (wrong keys) is an error with its
// reason, never a confirmation.
func TestForceDetachRefusedSaysWhy(t *testing.T) {
	ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{instance}, Volumes: map[string]string{"vol-0aaa": instance}})
	s := newScene(t, ep, providerID, "not-the-secret-key", nil)
	req := s.req(1, false)
	req.Volumes = released("vol-0aaa")
	st, err := s.p.ReleaseVolumes(context.Background(), req)
	if err == nil || providers.ReasonOf(err) != providers.ReasonCloudAuthFailed || st.State == providers.Confirmed {
		t.Errorf("ReleaseVolumes with wrong keys = %+v, %v; want a CloudAuthFailed error", st, err)
	}
	if ep.VolumeState("vol-0aaa") != "in-use" {
		t.Error("the volume was detached with wrong keys")
	}
}

// TestForceDetachOnlyOfTheInstanceStopped: the fence recorded the instance it stopped; node-1
// now names another (deleted and registered again under its name by a new instance that took
// the stopped one's address). Its volumes are not detached: ReleaseVolumes refuses with
// FenceTargetChanged and sends EC2 nothing.
func TestForceDetachOnlyOfTheInstanceStopped(t *testing.T) {
	const other = "i-00000000000000001"
	ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{instance, other},
		Volumes: map[string]string{"vol-0aaa": instance, "vol-0ccc": other}})
	s := newScene(t, ep, "aws:///us-east-1a/"+other, "", nil)
	req := s.req(1, false)
	req.Volumes = released("vol-0aaa", "vol-0ccc")
	stopped, err := newScene(t, ep, providerID, "", nil).p.FenceTarget(context.Background(), req) // before: node-1 on instance
	if err != nil || !strings.Contains(stopped, instance) {
		t.Fatalf("FenceTarget = %q, %v; want instance %s", stopped, err, instance)
	}
	req.Fence.Status.Steps = []v1alpha1.Step{
		{Name: v1alpha1.StepPowerOff, Method: s.method.Name, State: v1alpha1.StepSucceeded, Target: stopped},
		{Name: v1alpha1.StepDetachVolumes, Method: s.method.Name, State: v1alpha1.StepStarted}}
	st, err := s.p.ReleaseVolumes(context.Background(), req)
	if providers.ReasonOf(err) != providers.ReasonTargetChanged || !strings.Contains(fmt.Sprint(err), instance) || !strings.Contains(fmt.Sprint(err), other) {
		t.Fatalf("ReleaseVolumes of another instance = %+v, %v; want %s naming both instances", st, err, providers.ReasonTargetChanged)
	}
	for _, c := range ep.Calls() {
		t.Errorf("EC2 got %s %+v", c.Action, c)
	}
	for vol, want := range map[string]string{"vol-0aaa": "in-use", "vol-0ccc": "in-use"} {
		if got := ep.VolumeState(vol); got != want {
			t.Errorf("volume %s: %s, want %s", vol, got, want)
		}
	}
}

// TestForceDetachAfterTheNodeIsGone: node deletion lets the Node go once its fence holds, and
// the volumes are detached after that. With the Node gone, ReleaseVolumes acts on the instance
// the fence recorded before its off command — and only on it; a fence that recorded none (or
// another node's) gets BadTarget, not retried, and EC2 gets nothing.
func TestForceDetachAfterTheNodeIsGone(t *testing.T) {
	const other = "i-00000000000000001"
	ep := ec2sim.Start(t, ec2sim.Options{Instances: []string{instance, other},
		Volumes: map[string]string{"vol-0aaa": instance, "vol-0ccc": other}})
	s := newScene(t, ep, providerID, "", nil)
	ctx := context.Background()
	stopped, err := s.p.FenceTarget(ctx, s.req(1, false))
	if err != nil || !strings.Contains(stopped, instance) {
		t.Fatalf("FenceTarget = %q, %v; want instance %s", stopped, err, instance)
	}
	reader := fake.NewClientBuilder().WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "aws"},
		Data: map[string][]byte{aws.KeyAccessKeyID: []byte(ep.AccessKeyID()), aws.KeySecretAccessKey: []byte(ep.SecretAccessKey())}}).Build()
	gone := aws.New(reader) // the Node is deleted: only the Secret is left
	withRecord := func(target string) providers.Request {
		req := s.req(1, false)
		req.Volumes = released("vol-0aaa")
		req.Fence.Status.Steps = []v1alpha1.Step{
			{Name: v1alpha1.StepPowerOff, Method: s.method.Name, State: v1alpha1.StepSucceeded, Target: target},
			{Name: v1alpha1.StepDetachVolumes, Method: s.method.Name, State: v1alpha1.StepStarted}}
		return req
	}
	for name, target := range map[string]string{"no record": "", "another node's record": strings.Replace(stopped, "node-1", "node-2", 1), "garbled record": "node-1 (an instance)"} {
		st, err := gone.ReleaseVolumes(ctx, withRecord(target))
		if providers.ReasonOf(err) != providers.ReasonBadTarget || providers.IsRetryable(err) || st.State == providers.Confirmed || !strings.Contains(fmt.Sprint(err), "node-1 is gone") {
			t.Errorf("%s: ReleaseVolumes = %+v, %v; want BadTarget, not retried, saying the node is gone", name, st, err)
		}
		if !strings.Contains(providers.HintOf(err), "by hand") {
			t.Errorf("%s: hint %q, want what to do by hand for a node that is gone", name, providers.HintOf(err))
		}
	}
	for _, c := range ep.Calls() {
		t.Errorf("EC2 got %s %+v without a record of the instance", c.Action, c)
	}
	st, err := gone.ReleaseVolumes(ctx, withRecord(stopped))
	if err != nil || st.State != providers.InProgress || !strings.Contains(st.Message, "vol-0aaa") {
		t.Fatalf("ReleaseVolumes of the recorded instance = %+v, %v; want InProgress, detaching vol-0aaa", st, err)
	}
	st, err = gone.ReleaseVolumes(ctx, withRecord(stopped))
	if err != nil || st.State != providers.Confirmed {
		t.Fatalf("ReleaseVolumes once detached = %+v, %v; want Confirmed", st, err)
	}
	for vol, want := range map[string]string{"vol-0aaa": "available", "vol-0ccc": "in-use"} {
		if got := ep.VolumeState(vol); got != want {
			t.Errorf("volume %s: %s, want %s", vol, got, want)
		}
	}
}
