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
		name     string
		objs     []client.Object
		want     Result
		wantLeft []string // attachments left in the API, any node
	}{
		{"deletes the node's attachments only", []client.Object{va("a", "n1", 0, false), va("b", "n2", 0, false)},
			Result{Deleted: 1}, []string{"b"}},
		{"waits for the attacher while it works", []client.Object{va("a", "n1", 5*time.Second, false, finalizer)},
			Result{Remaining: []string{"a"}}, []string{"a"}},
		{"waits for the attacher's retries after a detach error", []client.Object{va("a", "n1", 5*time.Second, true, finalizer)},
			Result{Remaining: []string{"a"}}, []string{"a"}},
		{"frees an attachment whose detach failed for ForceAfter", []client.Object{va("a", "n1", DefaultForceAfter, true, finalizer)},
			Result{FinalizersRemoved: 1}, nil},
		{"waits for an attacher that has not acted, past ForceAfter", []client.Object{va("a", "n1", time.Hour, false, finalizer)},
			Result{Remaining: []string{"a"}}, []string{"a"}},
		{"leaves other finalizers alone", []client.Object{va("a", "n1", time.Minute, true, finalizer, "example.com/other")},
			Result{FinalizersRemoved: 1, Remaining: []string{"a"}}, []string{"a"}},
		{"deleting with a finalizer keeps it listed", []client.Object{va("a", "n1", 0, false, finalizer)},
			Result{Deleted: 1, Remaining: []string{"a"}}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(s); err != nil {
				t.Fatal(err)
			}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(tt.objs...).Build()
			r := &Releaser{Reader: c, Writer: c, Now: func() time.Time { return now }}
			got, err := r.Release(context.Background(), "n1")
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
