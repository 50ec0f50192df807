package node

import (
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"palisade.dev/palisade/providers/executor/protocol"
)

// keptSpec is a pod's spec as the agent kept it from the API server, and when it last got it.
type keptSpec struct {
	pod    *corev1.Pod
	keptAt time.Time
}

// keptSpecs decodes the specs of the agent's request by pod UID. A spec that does not decode
// is left out (its pod is then restored from the runtime's labels alone), and said so in errs.
func keptSpecs(pods []protocol.Pod) (specs map[string]*keptSpec, errs []error) {
	specs = make(map[string]*keptSpec, len(pods))
	for _, p := range pods {
		pod, err := decodeSpec(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("the spec kept of pod %s/%s (%s): %w", p.Metadata.Namespace, p.Metadata.Name, p.Metadata.UID, err))
			continue
		}
		specs[p.Metadata.UID] = &keptSpec{pod: pod, keptAt: p.KeptAt}
	}
	return specs, errs
}

// decodeSpec makes a corev1.Pod of p, whose fields carry v1.Pod's JSON names.
func decodeSpec(p protocol.Pod) (*corev1.Pod, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(raw, pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// withSpec completes pod, restored from the runtime's labels and annotations (restorePod), with
// the spec the agent kept of it: its sidecars (init containers with restartPolicy Always, which
// the executor stops after the main containers, in the reverse order of their declaration), each
// container's lifecycle (preStop hook and stopSignal) and ports, its terminationGracePeriodSeconds,
// and the shorter of the two deletion grace periods (the kept one may come from a deletion
// after the containers were created, which their annotation does not know). The runtime's
// containers still decide what is stopped: one the spec does not name (a pod's containers
// cannot be renamed, so an ephemeral one: kubectl debug; the kept spec leaves those out) is
// stopped as the kubelet stops an ephemeral container, beside the main containers and with no
// sidecar waiting for it; one the spec names that the runtime does not hold is left out.
func withSpec(pod, kept *corev1.Pod) {
	pod.DeletionGracePeriodSeconds = shorter(pod.DeletionGracePeriodSeconds, kept.DeletionGracePeriodSeconds)
	if g := kept.Spec.TerminationGracePeriodSeconds; g != nil {
		pod.Spec.TerminationGracePeriodSeconds = g
	}
	inRuntime := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		inRuntime[c.Name] = true
	}
	pick := func(list []corev1.Container) []corev1.Container {
		var out []corev1.Container
		for _, c := range list {
			if inRuntime[c.Name] {
				out = append(out, c)
				delete(inRuntime, c.Name)
			}
		}
		return out
	}
	inits, mains := pick(kept.Spec.InitContainers), pick(kept.Spec.Containers)
	var others []corev1.EphemeralContainer
	for _, c := range pod.Spec.Containers { // in the runtime, not in the spec
		if inRuntime[c.Name] {
			others = append(others, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon(c)})
		}
	}
	pod.Spec.InitContainers, pod.Spec.Containers, pod.Spec.EphemeralContainers = inits, mains, others
}

// shorter is the shorter of two grace periods, either of which may be unset.
func shorter(a, b *int64) *int64 {
	if a == nil || b != nil && *b < *a {
		return b
	}
	return a
}
