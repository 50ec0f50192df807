package attach

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const finalizer = "external-attacher/rwo-csi-example-com" // external-attacher's name for driver rwo.csi.example.com

func va(name, node string, deleting time.Duration, detachErr bool, finalizers ...string) *storagev1.VolumeAttachment {
	v := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec:       storagev1.VolumeAttachmentSpec{NodeName: node, Attacher: "rwo.csi.example.com", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-" + name)}},
	}
	v.Finalizers = finalizers
	if deleting > 0 {
		v.DeletionTimestamp = &metav1.Time{Time: now.Add(-deleting)}
	}
	if detachErr {
		v.Status.DetachError = &storagev1.VolumeError{Message: "node unreachable"}
	}
	return v
}

var now = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// newClient is a fake API server holding objs, with the API server's pod field selector on
// spec.nodeName.
func newClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		Build()
}

// attachmentsLeft names the attachments in c, of any node.
func attachmentsLeft(t *testing.T, c client.Client) []string {
	t.Helper()
	var list storagev1.VolumeAttachmentList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, v := range list.Items {
		left = append(left, v.Name)
	}
	return left
}

// podUsing is a pod in namespace db on node, in phase, with a volume of each claim.
func podUsing(name, node string, phase corev1.PodPhase, tolerations []corev1.Toleration, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name}, Spec: corev1.PodSpec{NodeName: node, Tolerations: tolerations},
		Status: corev1.PodStatus{Phase: phase}}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

// claim is claim name in namespace db, bound to volume pv.
func claim(name, pv string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}}
}

func TestRelease(t *testing.T) {
	tests := []struct {
		name string
		objs []client.Object
		// errorSeenFor: a pass before this one, that long ago, saw the same attachments.
		errorSeenFor time.Duration
		want         Result
		wantLeft     []string // attachments left in the API, any node
	}{
		{"deletes the node's attachments only", []client.Object{va("a", "n1", 0, false), va("b", "n2", 0, false)},
			0, Result{Deleted: 1}, []string{"b"}},
		{"waits for the attacher while it works", []client.Object{va("a", "n1", 5*time.Second, false, finalizer)},
			0, Result{Remaining: []string{"a"}}, []string{"a"}},
		{"waits for the attacher's retries after a detach error", []client.Object{va("a", "n1", 5*time.Second, true, finalizer)},
			0, Result{Remaining: []string{"a"}}, []string{"a"}},
		{"frees an attachment whose detach failed for ForceAfter", []client.Object{va("a", "n1", DefaultForceAfter, true, finalizer)},
			DefaultForceAfter, Result{Forced: []string{"a (pv-a)"}}, nil},
		{"waits when the error is first seen long after the deletion", []client.Object{va("a", "n1", time.Hour, true, finalizer)},
			0, Result{Remaining: []string{"a"}}, []string{"a"}},
		{"waits when the error was seen for less than ForceAfter", []client.Object{va("a", "n1", time.Hour, true, finalizer)},
			DefaultForceAfter - time.Second, Result{Remaining: []string{"a"}}, []string{"a"}},
		{"waits for an attacher that has not acted, past ForceAfter", []client.Object{va("a", "n1", time.Hour, false, finalizer)},
			time.Hour, Result{Remaining: []string{"a"}}, []string{"a"}},
		{"leaves other finalizers alone", []client.Object{va("a", "n1", time.Minute, true, finalizer, "example.com/other")},
			time.Minute, Result{Forced: []string{"a (pv-a)"}, Remaining: []string{"a"}}, []string{"a"}},
		{"deleting with a finalizer keeps it listed", []client.Object{va("a", "n1", 0, false, finalizer)},
			0, Result{Deleted: 1, Remaining: []string{"a"}}, []string{"a"}},
		// The attacher let go of it (its finalizer gone); another controller's finalizer keeps
		// the object: released as far as the fence goes, not waited for forever.
		{"an attachment the attacher let go of, kept by another finalizer, is released", []client.Object{va("a", "n1", time.Minute, false, "example.com/other")},
			0, Result{HeldByOthers: []string{"a (example.com/other)"}}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.objs...)
			clock := now.Add(-tt.errorSeenFor)
			r := &Releaser{Reader: c, Writer: c, Now: func() time.Time { return clock }}
			if tt.errorSeenFor > 0 {
				if _, err := r.Release(context.Background(), "n1", mayForce, time.Time{}); err != nil {
					t.Fatal(err)
				}
				clock = now
			}
			got, err := r.Release(context.Background(), "n1", mayForce, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLeft, attachmentsLeft(t, c)); diff != "" {
				t.Errorf("attachments left (-want +got):\n%s", diff)
			}
		})
	}
}

// The detach error must last: one cleared between passes, or forgotten by a new Releaser (a new
// leader), starts the count again; an attachment gone is forgotten.
func TestDetachErrorMustLast(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, va("a", "n1", time.Hour, true, finalizer))
	clock := now
	r := &Releaser{Reader: c, Writer: c, Now: func() time.Time { return clock }}
	pass := func(when time.Duration, detachErr bool, want Result) {
		t.Helper()
		clock = now.Add(when)
		var cur storagev1.VolumeAttachment
		if err := c.Get(ctx, client.ObjectKey{Name: "a"}, &cur); err == nil {
			cur.Status.DetachError = nil
			if detachErr {
				cur.Status.DetachError = &storagev1.VolumeError{Message: "node unreachable"}
			}
			if err := c.Status().Update(ctx, &cur); err != nil {
				t.Fatal(err)
			}
		}
		got, err := r.Release(ctx, "n1", mayForce, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("pass at +%s (-want +got):\n%s", when, diff)
		}
	}
	waiting := Result{Remaining: []string{"a"}}
	pass(0, true, waiting)
	pass(20*time.Second, false, waiting) // the attacher retried: its error cleared
	pass(25*time.Second, true, waiting)  // and failed again: counted from here
	pass(50*time.Second, true, waiting)  // 25 s of the error, though 50 s since the first
	r = &Releaser{Reader: c, Writer: c, Now: func() time.Time { return clock }}
	pass(60*time.Second, true, waiting) // a new leader: 35 s of the error, none of them seen by it
	pass(89*time.Second, true, waiting)
	pass(90*time.Second, true, Result{Forced: []string{"a (pv-a)"}})
	if len(r.failing) != 1 {
		t.Errorf("before the pass after the attachment went, %d remembered, want 1", len(r.failing))
	}
	pass(91*time.Second, true, Result{})
	if len(r.failing) != 0 {
		t.Errorf("after the attachment went, %d remembered, want none", len(r.failing))
	}
}

// mayForce is a caller that may force and records nothing.
func mayForce([]string) error { return nil }

// A stuck attacher's finalizer is removed only after the caller was told which attachments are
// about to be freed, while each still has it; when the caller cannot record them, none is freed.
func TestForceIsToldFirst(t *testing.T) {
	ctx := context.Background()
	objs := func() []client.Object {
		return []client.Object{va("a", "n1", time.Hour, true, finalizer), va("b", "n1", time.Hour, true, finalizer, "example.com/other"),
			va("c", "n1", time.Hour, false, finalizer)}
	}
	pass := func(r *Releaser, force func([]string) error) (Result, error) {
		t.Helper()
		r.Now = func() time.Time { return now.Add(-time.Hour) }
		if _, err := r.Release(ctx, "n1", force, time.Time{}); err != nil { // the detach errors first seen
			t.Fatal(err)
		}
		r.Now = func() time.Time { return now }
		return r.Release(ctx, "n1", force, time.Time{})
	}

	c := newClient(t, objs()...)
	var told []string
	got, err := pass(&Releaser{Reader: c, Writer: c}, func(freeing []string) error {
		for _, name := range []string{"a", "b"} {
			var cur storagev1.VolumeAttachment
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &cur); err != nil || !slices.Contains(cur.Finalizers, finalizer) {
				t.Errorf("attachment %s freed before the caller was told (%v)", name, err)
			}
		}
		if told != nil {
			t.Errorf("told twice: %v, then %v", told, freeing)
		}
		told = freeing
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a (pv-a)", "b (pv-b)"}; !cmp.Equal(told, want) || !cmp.Equal(got.Forced, want) {
		t.Errorf("told %v, freed %v; want %v for both", told, got.Forced, want)
	}
	if diff := cmp.Diff([]string{"c", "b"}, got.Remaining); diff != "" {
		t.Errorf("remaining (-want +got):\n%s", diff)
	}

	c = newClient(t, objs()...)
	got, err = pass(&Releaser{Reader: c, Writer: c}, func([]string) error { return errors.New("status write refused") })
	if err == nil || !strings.Contains(err.Error(), "status write refused") {
		t.Errorf("error = %v, want the caller's", err)
	}
	if len(got.Forced) != 0 || !cmp.Equal(got.Remaining, []string{"c", "a", "b"}) {
		t.Errorf("result = %+v, want nothing freed and all three remaining", got)
	}
	for _, name := range []string{"a", "b", "c"} {
		var cur storagev1.VolumeAttachment
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &cur); err != nil || !slices.Contains(cur.Finalizers, finalizer) {
			t.Errorf("attachment %s freed although the caller could not record it (%v)", name, err)
		}
	}
}

// A node that still runs (its workload stopped by the Executor, its volumes mounted) never has
// a stuck attacher's finalizer removed: skipping the unpublish would let the replacement's node
// mount a volume that node's kernel may still write. The attachment waits for the attacher.
func TestRunningNodeWaitsForItsAttacher(t *testing.T) {
	c := newClient(t, va("a", "n1", time.Hour, true, finalizer))
	clock := now.Add(-time.Hour)
	r := &Releaser{Reader: c, Writer: c, Now: func() time.Time { return clock }}
	for _, at := range []time.Time{now.Add(-time.Hour), now} { // the error seen for an hour
		clock = at
		got, err := r.Release(context.Background(), "n1", nil, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(Result{Remaining: []string{"a"}}, got); diff != "" {
			t.Errorf("pass at %s (-want +got):\n%s", at, diff)
		}
	}
	var left storagev1.VolumeAttachment
	if err := c.Get(context.Background(), client.ObjectKey{Name: "a"}, &left); err != nil || len(left.Finalizers) != 1 {
		t.Errorf("attachment a: finalizers %v (%v), want the attacher's kept", left.Finalizers, err)
	}
}

// An attachment whose volume a pod still on the node uses is not deleted, as the attach-detach
// controller keeps it. A pod that tolerates the out-of-service taint is not deleted by the fence
// and may run on (the Executor leaves the node running), nor is one created after the fence's
// confirmation (a replacement scheduled onto a node left running): their attachments are Kept,
// since deleting one would have the attacher unpublish the volume under it. Another pod still
// there is to go (with the policy's deletePods off, Kubernetes' eviction deletes it): its
// attachments wait for it (InUse). The volumes of pods that ended (a fence marks the pods it
// force-deletes Failed; a deleted pod with no container running), of pods on other nodes, of
// claims gone, and of an ephemeral claim of that name made for another pod are released; so is
// an attachment already being deleted, freed from a stuck attacher as any other.
func TestAttachmentsOfPodsLeftOnTheNodeAreKept(t *testing.T) {
	tolerates := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	confirmed := now.Add(-2 * time.Hour)
	ephemeral := podUsing("cache-0", "n1", corev1.PodRunning, tolerates)
	ephemeral.UID = "cache-0-uid"
	ephemeral.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}}
	owned := claim("cache-0-scratch", "pv-c")
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "cache-0", UID: "cache-0-uid", Controller: ptr.To(true)}}
	notOwned := podUsing("cache-1", "n1", corev1.PodRunning, tolerates)
	notOwned.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}}
	replacement := podUsing("db-3", "n1", corev1.PodRunning, nil, "data-h")
	replacement.CreationTimestamp = metav1.NewTime(confirmed.Add(time.Minute))
	stopped := podUsing("db-4", "n1", corev1.PodRunning, nil, "data-i")
	stopped.DeletionTimestamp, stopped.Finalizers = &metav1.Time{Time: now}, []string{"example.com/hold"}
	stopped.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "db", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}
	c := newClient(t,
		va("a", "n1", 0, false), va("b", "n1", 0, false), va("c", "n1", 0, false), va("d", "n1", 0, false),
		va("e", "n1", time.Hour, true, finalizer), va("f", "n1", 0, false), va("g", "n1", 0, false), va("h", "n1", 0, false),
		va("i", "n1", 0, false), va("j", "n1", 0, false),
		podUsing("backup-0", "n1", corev1.PodRunning, tolerates, "data-a", "data-b"), claim("data-a", "pv-a"), claim("data-b", "pv-b"),
		ephemeral, owned, notOwned, claim("cache-1-scratch", "pv-j"),
		podUsing("db-0", "n1", corev1.PodFailed, nil, "data-d"), claim("data-d", "pv-d"),
		podUsing("job-0", "n1", corev1.PodPending, tolerates, "data-e"), claim("data-e", "pv-e"),
		podUsing("db-1", "n2", corev1.PodRunning, nil, "data-f"), claim("data-f", "pv-f"),
		podUsing("db-2", "n1", corev1.PodRunning, nil, "data-g"), claim("data-g", "pv-g"),
		replacement, claim("data-h", "pv-h"), stopped, claim("data-i", "pv-i"),
		podUsing("gone-0", "n1", corev1.PodRunning, tolerates, "no-such-claim"))
	clock := now.Add(-time.Hour)
	r := &Releaser{Reader: c, Writer: c, Now: func() time.Time { return clock }}
	kept := []string{"a (pv-a, used by db/backup-0)", "b (pv-b, used by db/backup-0)", "c (pv-c, used by db/cache-0)", "h (pv-h, used by db/db-3)"}
	inUse := []string{"g (pv-g, used by db/db-2)"}
	for _, pass := range []struct { // e's detach error seen for an hour
		at   time.Time
		want Result
	}{
		{now.Add(-time.Hour), Result{Deleted: 4, Remaining: []string{"e"}, Kept: kept, InUse: inUse}}, // d, f, i and j
		{now, Result{Forced: []string{"e (pv-e)"}, Kept: kept, InUse: inUse}},
	} {
		at, want := pass.at, pass.want
		clock = at
		got, err := r.Release(context.Background(), "n1", mayForce, confirmed)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("pass at %s (-want +got):\n%s", at, diff)
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c", "g", "h"}, attachmentsLeft(t, c)); diff != "" {
		t.Errorf("attachments left (-want +got):\n%s", diff)
	}
}

// TestReleasingNamesTheVolumesReleased: Releasing names the volumes of exactly the attachments a
// Release would let go, read from their PersistentVolumes (CSI, in-tree AWS EBS) or inline
// specs, and none of an attachment kept for a pod that stays, waiting for a pod still to go,
// or of another node; it deletes nothing.
func TestReleasingNamesTheVolumesReleased(t *testing.T) {
	tolerates := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	csi := func(name, handle string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: handle}}}}
	}
	inline := va("inline", "n1", 0, false)
	inline.Spec.Source = storagev1.VolumeAttachmentSource{InlineVolumeSpec: &corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-0inline"}}}}
	c := newClient(t,
		va("kept", "n1", 0, false), csi("pv-kept", "vol-0kept"), podUsing("backup-0", "n1", corev1.PodRunning, tolerates, "data-kept"), claim("data-kept", "pv-kept"),
		va("busy", "n1", 0, false), csi("pv-busy", "vol-0busy"), podUsing("db-1", "n1", corev1.PodRunning, nil, "data-busy"), claim("data-busy", "pv-busy"),
		va("free", "n1", 0, false), csi("pv-free", "vol-0free"), podUsing("db-0", "n1", corev1.PodFailed, nil, "data-free"), claim("data-free", "pv-free"),
		va("intree", "n1", time.Minute, false, finalizer), &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-intree"}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-0tree"}}}},
		inline, va("nopv", "n1", 0, false),
		va("other", "n2", 0, false), csi("pv-other", "vol-0other"))
	r := &Releaser{Reader: c, Writer: c, Now: func() time.Time { return now }}
	vols, inUse, err := r.Releasing(context.Background(), "n1", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Volume{
		{Attachment: "free", Driver: "ebs.csi.aws.com", Handle: "vol-0free"},
		{Attachment: "inline", Driver: "ebs.csi.aws.com", Handle: "vol-0inline"},
		{Attachment: "intree", Driver: "ebs.csi.aws.com", Handle: "vol-0tree"},
		{Attachment: "nopv"},
	}
	if diff := cmp.Diff(want, vols); diff != "" {
		t.Errorf("volumes released (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"busy (pv-busy, used by db/db-1)"}, inUse); diff != "" {
		t.Errorf("in use (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"busy", "free", "inline", "intree", "kept", "nopv", "other"}, attachmentsLeft(t, c)); diff != "" {
		t.Errorf("attachments left (-want +got):\n%s", diff)
	}
}

// TestInlineVolumesAreMatchedToTheirPods: the attachment of an inline in-tree volume (migrated to
// CSI: the attach-detach controller names it by the translated spec, CSI or still in-tree) is
// kept while a pod that stays uses that volume inline, and waits while one that is to go does;
// another inline volume's attachment is released.
func TestInlineVolumesAreMatchedToTheirPods(t *testing.T) {
	tolerates := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	ebsInline := func(pod, node string, phase corev1.PodPhase, tol []corev1.Toleration, id string) *corev1.Pod {
		p := podUsing(pod, node, phase, tol)
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: id}}}}
		return p
	}
	inline := func(name string, spec corev1.PersistentVolumeSource) *storagev1.VolumeAttachment {
		v := va(name, "n1", 0, false)
		v.Spec.Source = storagev1.VolumeAttachmentSource{InlineVolumeSpec: &corev1.PersistentVolumeSpec{PersistentVolumeSource: spec}}
		return v
	}
	csi := func(handle string) corev1.PersistentVolumeSource {
		return corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: handle}}
	}
	c := newClient(t,
		ebsInline("backup-0", "n1", corev1.PodRunning, tolerates, "aws://us-east-1a/vol-0aaa"), inline("kept", csi("vol-0aaa")),
		ebsInline("cache-0", "n1", corev1.PodRunning, tolerates, "vol-0bbb"),
		inline("kept-intree", corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-0bbb"}}),
		ebsInline("db-0", "n1", corev1.PodRunning, nil, "vol-0ccc"), inline("busy", csi("vol-0ccc")),
		ebsInline("db-1", "n2", corev1.PodRunning, tolerates, "vol-0ddd"), inline("free", csi("vol-0ddd")))
	r := &Releaser{Reader: c, Writer: c, Now: func() time.Time { return now }}
	got, err := r.Release(context.Background(), "n1", mayForce, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := Result{Deleted: 1,
		Kept:  []string{"kept (inline ebs.csi.aws.com^vol-0aaa, used by db/backup-0)", "kept-intree (inline ebs.csi.aws.com^vol-0bbb, used by db/cache-0)"},
		InUse: []string{"busy (inline ebs.csi.aws.com^vol-0ccc, used by db/db-0)"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Release (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"busy", "kept", "kept-intree"}, attachmentsLeft(t, c)); diff != "" {
		t.Errorf("attachments left (-want +got):\n%s", diff)
	}
}
