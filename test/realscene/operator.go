package realscene

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"palisade.dev/palisade/test/scenario"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ForceDeletingOperator is what people do without a fencing controller, until ctx ends: every
// second, for each machine whose Node is not Ready, `kubectl delete pod --grace-period=0
// --force` of each of its pods and `kubectl delete volumeattachment` of each of its volume
// attachments, so that the StatefulSet's replacement can start and attach elsewhere. logf
// says what it does.
func (s *Scene) ForceDeletingOperator(ctx context.Context, logf func(format string, args ...any)) {
	c := s.Cluster.Client
	_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		for _, m := range s.Machines {
			n := &corev1.Node{}
			if err := c.Get(ctx, client.ObjectKey{Name: m.Name()}, n); err != nil || scenario.NodeReady(n) {
				continue
			}
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace("default")); err == nil {
				for i := range pods.Items {
					if p := &pods.Items[i]; p.Spec.NodeName == m.Name() {
						logf("operator: %s is NotReady: kubectl delete pod %s --grace-period=0 --force", m.Name(), p.Name)
						_ = c.Delete(ctx, p, client.GracePeriodSeconds(0))
					}
				}
			}
			var vas storagev1.VolumeAttachmentList
			if err := c.List(ctx, &vas); err == nil {
				for i := range vas.Items {
					if va := &vas.Items[i]; va.Spec.NodeName == m.Name() && va.DeletionTimestamp == nil {
						logf("operator: %s is NotReady: kubectl delete volumeattachment %s", m.Name(), va.Name)
						_ = c.Delete(ctx, va)
					}
				}
			}
		}
		return false, nil
	})
}
