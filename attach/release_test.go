package attach

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
			DefaultForceAfter, Result{FinalizersRemoved: 1}, nil},
		{"waits when the error is first seen long after the deletion", []client.Object{va("a", "n1", time.Hour, true, finalizer)},
			0, Result{Remaining: []string{"a"}}, []string{"a"}},
		{"waits when the error was seen for less than ForceAfter", []client.Object{va("a", "n1", time.Hour, true, finalizer)},
			DefaultForceAfter - time.Second, Result{Remaining: []string{"a"}}, []string{"a"}},
		{"waits for an attacher that has not acted, past ForceAfter", []client.Object{va("a", "n1", time.Hour, false, finalizer)},
			time.Hour, Result{Remaining: []string{"a"}}, []string{"a"}},
		{"leaves other finalizers alone", []client.Object{va("a", "n1", time.Minute, true, finalizer, "example.com/other")},
			time.Minute, Result{FinalizersRemoved: 1, Remaining: []string{"a"}}, []string{"a"}},
		{"deleting with a finalizer keeps it listed", []client.Object{va("a", "n1", 0, false, finalizer)},
			0, Result{Deleted: 1, Remaining: []string{"a"}}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(s); err != nil {
				t.Fatal(err)
			}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(tt.objs...).Build()
			clock := now.Add(-tt.errorSeenFor)
			r := &Releaser{Reader: c, Writer: c, Now: func() time.Time { return clock }}
			if tt.errorSeenFor > 0 {
				if _, err := r.Release(context.Background(), "n1", true); err != nil {
					t.Fatal(err)
				}
				clock = now
			}
			got, err := r.Release(context.Background(), "n1", true)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			var list storagev1.VolumeAttachmentList
			if err := c.List(context.Background(), &list); err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, v := range list.Items {
				left = append(left, v.Name)
			}
			if diff := cmp.Diff(tt.wantLeft, left); diff != "" {
				t.Errorf("attachments left (-want +got):\n%s", diff)
			}
		})
	}
}

// The detach error must last: one cleared between passes, or forgotten by a new Releaser (a new
// leader), starts the count again; an attachment gone is forgotten.
func TestDetachErrorMustLast(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := va("a", "n1", time.Hour, true, finalizer)
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(a).Build()
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
		got, err := r.Release(ctx, "n1", true)
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
	pass(90*time.Second, true, Result{FinalizersRemoved: 1})
	if len(r.failing) != 1 {
		t.Errorf("before the pass after the attachment went, %d remembered, want 1", len(r.failing))
	}
	pass(91*time.Second, true, Result{})
	if len(r.failing) != 0 {
		t.Errorf("after the attachment went, %d remembered, want none", len(r.failing))
	}
}

// A node that still runs (its workload stopped by the Executor, its volumes mounted) never has
// a stuck attacher's finalizer removed: skipping the unpublish would let the replacement's node
// mount a volume that node's kernel may still write. The attachment waits for the attacher.
func TestRunningNodeWaitsForItsAttacher(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(va("a", "n1", time.Hour, true, finalizer)).Build()
	clock := now.Add(-time.Hour)
	r := &Releaser{Reader: c, Writer: c, Now: func() time.Time { return clock }}
	for _, at := range []time.Time{now.Add(-time.Hour), now} { // the error seen for an hour
		clock = at
		got, err := r.Release(context.Background(), "n1", false)
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
