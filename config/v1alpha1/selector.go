package v1alpha1

import "k8s.io/apimachinery/pkg/labels"

// LastNodeSelector is the node selector last in force (status.nodeSelector), parsed; ok is
// false when there is none, or it does not parse.
func (p *FencingPolicy) LastNodeSelector() (sel labels.Selector, ok bool) {
	if p.Status.NodeSelector == nil {
		return nil, false
	}
	sel, err := labels.Parse(*p.Status.NodeSelector)
	return sel, err == nil
}
