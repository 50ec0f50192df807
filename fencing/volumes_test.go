package fencing

import (
	"context"
	"errors"
	"testing"
	"time"

	attachercontroller "github.com/kubernetes-csi/external-attacher/v4/pkg/controller"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/fake"
)

// cloud is a power provider that also releases volumes: each ReleaseVolumes answers the next
// of answers (the last one again once they run out).
type cloud struct {
	*fake.Provider
	answers []providers.Status
	errs    []error
	calls   int
}

func (c *cloud) ReleaseVolumes(context.Context, providers.Request) (providers.Status, error) {
	i := min(c.calls, len(c.answers)-1)
	c.calls++
	var err error
	if i < len(c.errs) {
		err = c.errs[i]
	}
	return c.answers[i], err
}

// awsWorld is a world whose method "cloud" is of type AWS, with forceDetachVolumes as given,
// served by c.
func awsWorld(t *testing.T, force bool, c *cloud) *world {
	t.Helper()
	w := newWorld(t, "cloud")
	nf := &v1alpha1.NodeFence{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nf); err != nil {
		t.Fatal(err)
	}
	nf.Spec.Methods[0] = v1alpha1.Method{Name: "cloud", Type: v1alpha1.MethodAWS, Timeout: nf.Spec.Methods[0].Timeout,
		AWS: &v1alpha1.AWSMethod{ForceDetachVolumes: force}}
	if err := w.c.Update(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	c.Provider = w.power
	w.r.Fencers[v1alpha1.MethodAWS] = c
	return w
}

// TestDetachVolumesStep: with forceDetachVolumes, the confirmed AWS fence force-detaches the
// instance's volumes after the pods are deleted and before the attachments are released, and
// goes on only once the provider reads them detached; an error keeps the step pending, saying
// why, and never fails a fence whose pods are already deleted. Without it, there is no such step.
func TestDetachVolumesStep(t *testing.T) {
	detaching := providers.Status{State: providers.InProgress, Reason: "VolumesDetaching", Message: "waiting for EBS volumes vol-1 to detach"}
	denied := providers.NewError(providers.ReasonCloudAuthFailed, errors.New("UnauthorizedOperation: ec2:DetachVolume"))
	for _, tc := range []struct {
		name  string
		force bool
		c     *cloud
	}{
		{"detach-volumes", true, &cloud{answers: []providers.Status{detaching, detaching, {State: providers.Confirmed, Message: "no EBS volume is attached"}}}},
		{"detach-volumes-denied-then-allowed", true, &cloud{answers: []providers.Status{{}, detaching, {State: providers.Confirmed}}, errs: []error{denied}}},
		{"no-detach-volumes", false, &cloud{answers: []providers.Status{{State: providers.Confirmed}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := awsWorld(t, tc.force, tc.c)
			sawDenied := false
			w.tick = func(nf *v1alpha1.NodeFence) {
				for _, s := range nf.Status.Steps {
					sawDenied = sawDenied || s.Name == v1alpha1.StepDetachVolumes && s.Reason == string(providers.ReasonCloudAuthFailed)
				}
			}
			nf := w.run(t)
			checkGolden(t, tc.name, goldenTrace(nf))
			checkReleased(t, w, true)
			if tc.force != (tc.c.calls > 0) {
				t.Errorf("ReleaseVolumes called %d times with forceDetachVolumes %v", tc.c.calls, tc.force)
			}
			if tc.c.errs != nil && !sawDenied {
				t.Error("the refused detach was not recorded on the step")
			}
		})
	}
}

// The attachments of a node the Executor fenced (left running, its volumes still mounted) wait
// for their attacher, however long it reports a detach error: its finalizer is never removed,
// which would skip the unpublish while the node's kernel may still write. A power fence's node
// is off: there the finalizer goes after the attacher failed for ForceAfter.
func TestStuckAttacherOfARunningNode(t *testing.T) {
	for _, tt := range []struct {
		method   string
		released bool
	}{{"executor", false}, {"ipmi", true}} {
		t.Run(tt.method, func(t *testing.T) {
			w := newWorld(t, tt.method)
			// The attachment's deletionTimestamp is the fake API server's wall clock: the
			// Releaser's clock is that, moved on by the simulated time.
			real, start := time.Now(), w.now
			w.r.Attachments.Now = func() time.Time { return real.Add(w.now.Sub(start)) }
			ctx := context.Background()
			va := &storagev1.VolumeAttachment{}
			if err := w.c.Get(ctx, client.ObjectKey{Name: "va1"}, va); err != nil {
				t.Fatal(err)
			}
			va.Finalizers = []string{attachercontroller.GetFinalizerName(va.Spec.Attacher)}
			if err := w.c.Update(ctx, va); err != nil {
				t.Fatal(err)
			}
			w.ticks = 120
			w.tick = func(*v1alpha1.NodeFence) {
				// The attacher cannot detach: ControllerUnpublishVolume fails on every try.
				if err := w.c.Get(ctx, client.ObjectKey{Name: "va1"}, va); err == nil && va.DeletionTimestamp != nil && va.Status.DetachError == nil {
					va.Status.DetachError = &storagev1.VolumeError{Message: "volume in use on the node"}
					if err := w.c.Status().Update(ctx, va); err != nil {
						t.Fatal(err)
					}
				}
			}
			nf, _ := w.advance(t)
			if released := nf.Status.Phase == v1alpha1.PhaseReleased; released != tt.released {
				t.Errorf("phase %s after 2 min of detach errors, want released %v\n%s", nf.Status.Phase, tt.released, goldenTrace(nf))
			}
			err := w.c.Get(ctx, client.ObjectKey{Name: "va1"}, va)
			if kept := err == nil && len(va.Finalizers) == 1; kept == tt.released {
				t.Errorf("attacher's finalizer kept %v (%v), want %v", kept, err, !tt.released)
			}
		})
	}
}
