package fencing

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

const (
	retryFence   = 2 * time.Second
	retryConfirm = 500 * time.Millisecond
	retryRelease = time.Second
	// resendOffEvery re-sends the off command while the power still reads On: a BMC may drop it.
	resendOffEvery = 5
)

// powerOff sends the off command through the method's provider.
func (r *NodeFenceReconciler) powerOff(ctx context.Context, nf *v1alpha1.NodeFence, i int) outcome {
	m := nf.Spec.Methods[i]
	fencer, target, bad := r.provider(ctx, nf, m)
	if bad != nil {
		return *bad
	}
	if err := fencer.PowerOff(ctx, target); err != nil {
		return r.providerFailure(nf, m, "sending power-off", err)
	}
	return done("power-off command accepted by the BMC of %s", target)
}

// confirmOff reads the power state back until it is Off (invariant 1: confirm, don't assume).
func (r *NodeFenceReconciler) confirmOff(ctx context.Context, nf *v1alpha1.NodeFence, i int) outcome {
	m := nf.Spec.Methods[i]
	fencer, target, bad := r.provider(ctx, nf, m)
	if bad != nil {
		return *bad
	}
	state, err := fencer.PowerState(ctx, target)
	if err != nil {
		return r.providerFailure(nf, m, "reading power state", err)
	}
	if state == providers.PowerOff {
		return done("power state Off read back from the BMC of %s", target)
	}
	elapsed := r.now().Sub(nf.Status.MethodStartTime.Time).Round(100 * time.Millisecond)
	if r.timedOut(nf, m) {
		return failed(ReasonPowerStillOn, "the BMC of %s still reports power %s %s after the off command; check the BMC and the machine, then delete this NodeFence to try again", target, state, elapsed)
	}
	if a := lastStep(nf).Attempts; a%resendOffEvery == 0 {
		if err := fencer.PowerOff(ctx, target); err != nil {
			return r.providerFailure(nf, m, "re-sending power-off", err)
		}
	}
	return pending(retryConfirm, ReasonPowerStillOn, "power still reads %s %s after the off command", state, elapsed)
}

// hints tell an operator what to look at for each kind of provider failure.
var hints = map[providers.Reason]string{
	providers.ReasonUnreachable: "Check the node's " + v1alpha1.AnnotationBMCAddress + " annotation and the network path from the controller to the BMC, then delete this NodeFence to try again.",
	providers.ReasonAuthFailed:  "The BMC refused the credentials: check the username and password in the BMC Secret, then delete this NodeFence to try again.",
	providers.ReasonRefused:     "The BMC answered but did not carry out the command: check the BMC's own logs.",
	providers.ReasonBadTarget:   "Fix the node's BMC settings named above, then delete this NodeFence to try again.",
}

// providerFailure turns a provider error into a retry or, when it cannot help or the method
// has run out of time, a failed method.
func (r *NodeFenceReconciler) providerFailure(nf *v1alpha1.NodeFence, m v1alpha1.Method, doing string, err error) outcome {
	reason := providers.ReasonOf(err)
	if !providers.IsRetryable(err) {
		return failed(string(reason), "%s through method %s: %v. %s", doing, m.Name, err, hints[reason])
	}
	if r.timedOut(nf, m) {
		return failed(string(reason), "%s through method %s: no success within its timeout %s; last error: %v. %s", doing, m.Name, methodTimeout(m), err, hints[reason])
	}
	return pending(retryFence, string(reason), "%s: %v (retrying)", doing, err)
}

func (r *NodeFenceReconciler) timedOut(nf *v1alpha1.NodeFence, m v1alpha1.Method) bool {
	start := nf.Status.MethodStartTime
	return start != nil && r.now().Sub(start.Time) >= methodTimeout(m)
}

// taint adds node.kubernetes.io/out-of-service=nodeshutdown:NoExecute.
func (r *NodeFenceReconciler) taint(ctx context.Context, nf *v1alpha1.NodeFence) outcome {
	node := &corev1.Node{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: nf.Spec.NodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return done("node object is gone; nothing to taint")
		}
		return pending(retryRelease, "APIError", "reading node: %v", err)
	}
	for _, t := range node.Spec.Taints {
		if t.Key == v1alpha1.TaintOutOfService && t.Effect == corev1.TaintEffectNoExecute {
			return done("taint %s=%s:NoExecute present", t.Key, t.Value)
		}
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	now := metav1.NewTime(r.now())
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{
		Key: v1alpha1.TaintOutOfService, Value: v1alpha1.TaintOutOfServiceValue,
		Effect: corev1.TaintEffectNoExecute, TimeAdded: &now,
	})
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return pending(retryRelease, "APIError", "tainting node: %v", err)
	}
	return done("added taint %s=%s:NoExecute", v1alpha1.TaintOutOfService, v1alpha1.TaintOutOfServiceValue)
}

// releaseAttachments deletes the node's VolumeAttachments.
func (r *NodeFenceReconciler) releaseAttachments(ctx context.Context, nf *v1alpha1.NodeFence) outcome {
	res, err := r.Attachments.Release(ctx, nf.Spec.NodeName)
	nf.Status.AttachmentsReleased += int32(res.Deleted)
	if err != nil {
		return pending(retryRelease, "APIError", "releasing attachments: %v", err)
	}
	if len(res.Remaining) > 0 {
		return pending(retryRelease, "AttachmentsRemaining", "waiting for %d attachments to go: %v", len(res.Remaining), res.Remaining)
	}
	return done("%d volume attachments of the node released", nf.Status.AttachmentsReleased)
}

// provider finds the method's provider and the node's target; bad is the step's outcome when
// either is missing.
func (r *NodeFenceReconciler) provider(ctx context.Context, nf *v1alpha1.NodeFence, m v1alpha1.Method) (providers.PowerFencer, providers.Target, *outcome) {
	fencer, ok := r.Fencers[m.Type]
	if !ok {
		o := failed(ReasonNoProvider, "no provider is registered for method type %s", m.Type)
		return nil, providers.Target{}, &o
	}
	target, err := r.target(ctx, nf.Spec.NodeName, m)
	if err != nil {
		o := r.providerFailure(nf, m, "finding the BMC", err)
		return nil, providers.Target{}, &o
	}
	return fencer, target, nil
}

// target reads the node's BMC address from its annotation and the credentials from a Secret.
func (r *NodeFenceReconciler) target(ctx context.Context, nodeName string, m v1alpha1.Method) (providers.Target, error) {
	bad := func(format string, args ...any) error {
		return providers.NewError(providers.ReasonBadTarget, fmt.Errorf(format, args...))
	}
	if m.IPMI == nil {
		return providers.Target{}, bad("method %s has no ipmi settings", m.Name)
	}
	node := &corev1.Node{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
		return providers.Target{}, fmt.Errorf("reading node %s: %w", nodeName, err)
	}
	addr := node.Annotations[v1alpha1.AnnotationBMCAddress]
	if addr == "" {
		return providers.Target{}, bad("node %s has no annotation %s: set it to the BMC's host[:port]", nodeName, v1alpha1.AnnotationBMCAddress)
	}
	ref := m.IPMI.CredentialsSecretRef
	if name := node.Annotations[v1alpha1.AnnotationBMCSecret]; name != "" {
		ref.Name = name
	}
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return providers.Target{}, bad("Secret %s/%s with the BMC credentials of node %s does not exist", ref.Namespace, ref.Name, nodeName)
		}
		return providers.Target{}, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	t := providers.Target{Node: nodeName, Address: addr,
		Username: string(secret.Data["username"]), Password: string(secret.Data["password"])}
	if t.Username == "" || t.Password == "" {
		return providers.Target{}, bad("Secret %s/%s needs the keys username and password", ref.Namespace, ref.Name)
	}
	if m.IPMI.CipherSuite != nil {
		t.CipherSuite = fmt.Sprint(*m.IPMI.CipherSuite)
	}
	return t, nil
}
