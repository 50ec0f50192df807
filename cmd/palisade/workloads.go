package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// maxPodsShown bounds the pods explain lists.
const maxPodsShown = 10

// nodePods is what explain reads of a node's pods under a policy with workloads: which of them
// need its fence, by the controller's own rule (v1alpha1.WorkloadRule).
type nodePods struct {
	total int       // pods bound to the node
	need  []podNeed // those that need its fence, by namespace/name
	err   error     // the pods or their claims could not be read: nothing is known
}

// podNeed is a pod that needs its node's fence, and why.
type podNeed struct {
	name string // namespace/name
	why  v1alpha1.FenceNeed
}

// readPods lists the pods bound to the node (by spec.nodeName, as the controller does) and
// judges each by the workloads' rule, reading their claims' access modes.
func readPods(ctx context.Context, c client.Client, node string, w *v1alpha1.Workloads) *nodePods {
	rule, err := v1alpha1.NewWorkloadRule(w)
	if err != nil {
		return &nodePods{err: err}
	}
	var list corev1.PodList
	if err := c.List(ctx, &list, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return &nodePods{err: apiError(err, "list", podsResource, "", "")}
	}
	claims := func(namespace, name string) ([]corev1.PersistentVolumeAccessMode, error) {
		pvc := &corev1.PersistentVolumeClaim{}
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pvc)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, apiError(err, "get", claimsResource, namespace, name)
		}
		return pvc.Spec.AccessModes, err
	}
	out := &nodePods{total: len(list.Items)}
	for i := range list.Items {
		p := &list.Items[i]
		why, err := rule.NeedsFence(p, claims)
		if err != nil {
			return &nodePods{err: err}
		}
		if why.Needed() {
			out.need = append(out.need, podNeed{name: p.Namespace + "/" + p.Name, why: why})
		}
	}
	slices.SortFunc(out.need, func(a, b podNeed) int { return cmp.Compare(a.name, b.name) })
	return out
}

// writePods shows which of the node's pods need its fence under policy p, and why.
func writePods(w io.Writer, node string, p *v1alpha1.FencingPolicy, pods *nodePods) {
	switch {
	case pods.err != nil:
		fmt.Fprintf(w, "  Pods:             could not be read: %v\n", pods.err)
		return
	case len(pods.need) == 0:
		fmt.Fprintf(w, "  Pods:             %s\n", noPodText(node, p.Name, pods.total))
		return
	}
	verb := "needs"
	if len(pods.need) > 1 {
		verb = "need"
	}
	fmt.Fprintf(w, "  Pods:             %d of the %s on %s %s fencing under policy %s:\n", len(pods.need), countOf(pods.total, "pod"), node, verb, p.Name)
	for _, n := range pods.need[:min(len(pods.need), maxPodsShown)] {
		fmt.Fprintf(w, "    %s: %s\n", n.name, n.why)
	}
	if more := len(pods.need) - maxPodsShown; more > 0 {
		fmt.Fprintf(w, "    and %d more\n", more)
	}
}

// noPodText says that none of the node's pods needs its fence under the policy.
func noPodText(node, policy string, total int) string {
	head := fmt.Sprintf("no pod on %s needs fencing under policy %s: ", node, policy)
	switch total {
	case 0:
		return head + "the node holds none"
	case 1:
		return head + "its one pod is not one the policy fences for"
	}
	return head + fmt.Sprintf("none of its %d pods is one the policy fences for", total)
}
