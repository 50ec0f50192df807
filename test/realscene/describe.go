package realscene

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/testbed"
)

// Describe says, for a failing test, what the API holds of the scene: nodes (readiness,
// taints), pods (and why one is not scheduled), volume attachments, NodeFences and the latest
// events, and the scheduler's last log lines when a pod waits for a node.
func (s *Scene) Describe() string {
	ctx := context.Background()
	c := s.Cluster.Client
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", s.Cluster.Components())
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err == nil {
		for _, n := range nodes.Items {
			ready := "Unknown"
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					ready = string(cond.Status)
				}
			}
			var taints []string
			for _, t := range n.Spec.Taints {
				taints = append(taints, fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
			}
			fmt.Fprintf(&b, "node %s ready=%s unschedulable=%t taints %v\n", n.Name, ready, n.Spec.Unschedulable, taints)
		}
	}
	unscheduled := false
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s/%s uid %s on %q phase %s deleting=%t", p.Namespace, p.Name, p.UID, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil)
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status != corev1.ConditionTrue {
					fmt.Fprintf(&b, " not scheduled (%s: %s)", cond.Reason, cond.Message)
				}
			}
			b.WriteString("\n")
			unscheduled = unscheduled || (p.Spec.NodeName == "" && p.DeletionTimestamp == nil)
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
		sort.SliceStable(evs.Items, func(i, j int) bool { return eventTime(&evs.Items[i]).Before(eventTime(&evs.Items[j])) })
		if len(evs.Items) > 40 {
			evs.Items = evs.Items[len(evs.Items)-40:]
		}
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "event %s %s/%s %s: %s\n", eventTime(&e).Format("15:04:05"), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	if unscheduled {
		b.WriteString(testbed.TailFile(filepath.Join(s.Cluster.Dir, testbed.SchedulerLog), 30))
		b.WriteString("\n")
	}
	return b.String()
}

// eventTime is when an event last happened, whichever API wrote it: core/v1's LastTimestamp,
// or events.k8s.io/v1's series or EventTime (the scheduler's and Palisade's events).
func eventTime(e *corev1.Event) time.Time {
	t := e.LastTimestamp.Time
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if e.EventTime.After(t) {
		t = e.EventTime.Time
	}
	return t
}
