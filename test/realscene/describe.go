package realscene

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// Describe says, for a failing test, what the API holds of the scene: pods, volume
// attachments, NodeFences and the latest events.
func (s *Scene) Describe() string {
	ctx := context.Background()
	c := s.Cluster.Client
	var b strings.Builder
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s/%s uid %s on %q phase %s deleting=%t\n", p.Namespace, p.Name, p.UID, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil)
		}
	}
	var vas storagev1.VolumeAttachmentList
	if err := c.List(ctx, &vas); err == nil {
		for _, va := range vas.Items {
			fmt.Fprintf(&b, "volumeattachment %s node %s attached=%t deleting=%t attachError=%v\n", va.Name, va.Spec.NodeName, va.Status.Attached, va.DeletionTimestamp != nil, va.Status.AttachError)
		}
	}
	var fences v1alpha1.NodeFenceList
	if err := c.List(ctx, &fences); err == nil {
		for _, nf := range fences.Items {
			var steps []string
			for _, st := range nf.Status.Steps {
				steps = append(steps, fmt.Sprintf("%s=%s(%s %s)", st.Name, st.State, st.Reason, st.Message))
			}
			fmt.Fprintf(&b, "nodefence %s phase %s steps %v\n", nf.Spec.NodeName, nf.Status.Phase, steps)
		}
	}
	var evs corev1.EventList
	if err := c.List(ctx, &evs); err == nil {
		sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].LastTimestamp.Before(&evs.Items[j].LastTimestamp) })
		if len(evs.Items) > 40 {
			evs.Items = evs.Items[len(evs.Items)-40:]
		}
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "event %s %s/%s %s: %s\n", e.LastTimestamp.Format("15:04:05"), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	return b.String()
}
