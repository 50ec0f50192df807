package node

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's labels on the runtime's sandboxes and containers (k8s.io/kubelet/pkg/types),
// and the annotations it writes on every container so that it can kill the container without
// the pod's spec (pkg/kubelet/kuberuntime/labels.go).
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"

	annotationDeletionGrace    = "io.kubernetes.pod.deletionGracePeriod"
	annotationTerminationGrace = "io.kubernetes.pod.terminationGracePeriod"
	annotationPreStop          = "io.kubernetes.container.preStopHandler"
	annotationPorts            = "io.kubernetes.container.ports"
)

// runtimePod is a pod as the runtime knows it, by the kubelet's labels.
type runtimePod struct {
	uid, name, namespace string
	sandboxes            []*runtimeapi.PodSandbox
	containers           []*runtimeapi.Container
}

// listRuntimePods gathers the pods of the runtime's sandboxes and containers by their pod-UID
// label, leaving out the pod whose UID is exclude (the agent's own).
func listRuntimePods(ctx context.Context, cri internalapi.RuntimeService, exclude string) ([]*runtimePod, error) {
	sandboxes, err := cri.ListPodSandbox(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing pod sandboxes: %w", err)
	}
	containers, err := cri.ListContainers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	byUID := map[string]*runtimePod{}
	pod := func(labels map[string]string) *runtimePod {
		uid := labels[labelPodUID]
		if uid == "" || uid == exclude {
			return nil // not the kubelet's, or the agent's own
		}
		if byUID[uid] == nil {
			byUID[uid] = &runtimePod{uid: uid}
		}
		p := byUID[uid]
		if p.name == "" {
			p.name, p.namespace = labels[labelPodName], labels[labelPodNamespace]
		}
		return p
	}
	for _, sb := range sandboxes {
		if p := pod(sb.Labels); p != nil {
			p.sandboxes = append(p.sandboxes, sb)
		}
	}
	for _, c := range containers {
		if p := pod(c.Labels); p != nil {
			p.containers = append(p.containers, c)
		}
	}
	out := make([]*runtimePod, 0, len(byUID))
	for _, p := range byUID {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].namespace+"/"+out[i].name < out[j].namespace+"/"+out[j].name })
	return out, nil
}

// restorePod builds the pod the executor needs from what the runtime knows, as the kubelet's
// restoreSpecsFromContainerLabels does when it kills a container without the pod's spec: the
// pod's UID, name and namespace from the labels; its deletion and termination grace periods,
// and each container's preStop hook and ports, from the kubelet's annotations (the most
// recently created container's first). A container whose annotations are missing or
// unreadable is stopped as a main container without a hook; the grace period is then the
// default (30 s). No sidecar ordering: the runtime does not record which containers are
// sidecars, and the kubelet without the spec does not order them either; nor does it record a
// container's lifecycle.stopSignal (containerd 1.6 keeps the image's STOPSIGNAL alone, which
// the executor reads), nor a deletion's grace period given after the containers were
// created. The spec the agent kept of the pod brings those (withSpec).
func restorePod(p *runtimePod) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(p.uid), Name: p.name, Namespace: p.namespace}}
	ctrs := append([]*runtimeapi.Container(nil), p.containers...)
	sort.SliceStable(ctrs, func(i, j int) bool { return ctrs[i].CreatedAt > ctrs[j].CreatedAt }) // newest first
	seen := map[string]bool{}
	for _, c := range ctrs {
		a := c.Annotations
		if pod.DeletionGracePeriodSeconds == nil {
			pod.DeletionGracePeriodSeconds = parseSeconds(a[annotationDeletionGrace])
		}
		if pod.Spec.TerminationGracePeriodSeconds == nil {
			pod.Spec.TerminationGracePeriodSeconds = parseSeconds(a[annotationTerminationGrace])
		}
		name := c.Labels[labelContainerName]
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		spec := corev1.Container{Name: name}
		var preStop corev1.LifecycleHandler
		if raw := a[annotationPreStop]; raw != "" && json.Unmarshal([]byte(raw), &preStop) == nil {
			spec.Lifecycle = &corev1.Lifecycle{PreStop: &preStop}
		}
		if raw := a[annotationPorts]; raw != "" {
			_ = json.Unmarshal([]byte(raw), &spec.Ports) // without ports, only a named httpGet port fails
		}
		pod.Spec.Containers = append(pod.Spec.Containers, spec)
	}
	sort.Slice(pod.Spec.Containers, func(i, j int) bool { return pod.Spec.Containers[i].Name < pod.Spec.Containers[j].Name })
	return pod
}

// capGrace applies the cap (graceCap): the pod keeps its own grace period when it is shorter.
// The cap goes into deletionGracePeriodSeconds, which comes first in the executor's rules, as
// a deletion with a grace period would.
func capGrace(pod *corev1.Pod, own int64, limit *int64) {
	if limit != nil && *limit < own {
		g := *limit
		pod.DeletionGracePeriodSeconds = &g
	}
}

// needsPodIP says whether a container has an httpGet preStop hook without a host, which is
// sent to the pod's IP.
func needsPodIP(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if l := c.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.HTTPGet != nil && l.PreStop.HTTPGet.Host == "" {
				return true
			}
		}
	}
	return false
}

// podIP reads the IP of the pod's ready sandbox, as the kubelet does for an httpGet hook.
func podIP(ctx context.Context, cri internalapi.RuntimeService, p *runtimePod) string {
	for _, sb := range p.sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if resp, err := cri.PodSandboxStatus(ctx, sb.Id, false); err == nil && resp.GetStatus().GetNetwork() != nil {
			return resp.GetStatus().GetNetwork().GetIp()
		}
	}
	return ""
}

func parseSeconds(s string) *int64 {
	if s == "" {
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil
	}
	return &n
}
