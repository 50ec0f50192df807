package fencing

import (
	"context"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// volumeMethod is the method of the confirmed level that asks for the instance's volumes to
// be force-detached (AWS forceDetachVolumes), false when none does.
func volumeMethod(nf *v1alpha1.NodeFence) (v1alpha1.Method, bool) {
	i := methodIndex(nf, nf.Status.Method)
	for _, name := range levelNames(nf.Spec.Methods, i) {
		m := nf.Spec.Methods[methodIndex(nf, name)]
		if m.Type == v1alpha1.MethodAWS && m.AWS != nil && m.AWS.ForceDetachVolumes {
			return m, true
		}
	}
	return v1alpha1.Method{}, false
}

// detachVolumes is the DetachVolumes step: the provider of the method that asked force-detaches,
// from the stopped instance, the volumes of the node's attachments that the release lets go
// (attach.Releaser.Releasing: not those of pods that stay on the node, nor any volume without
// an attachment, such as the node's own) and reads them back. It waits, as ReleaseAttachments
// does, while a pod that is to go still uses one. It never fails the fence (the node's pods are
// gone by now): an error or a slow detach keeps it pending, saying why, and the step is taken
// again.
func (r *NodeFenceReconciler) detachVolumes(ctx context.Context, nf *v1alpha1.NodeFence) outcome {
	m, ok := volumeMethod(nf)
	if !ok {
		return done("no method of the fence asks for its volumes detached")
	}
	rel, ok := r.Fencers[m.Type].(providers.VolumeReleaser)
	if !ok {
		return pending(retryRelease, ReasonNoProvider, "no provider of method type %s releases volumes", m.Type)
	}
	vols, inUse, err := r.Attachments.Releasing(ctx, nf.Spec.NodeName, fencedAt(nf))
	if err != nil {
		return pending(retryRelease, ReasonAPIError, "reading the node's volume attachments: %v", err)
	}
	if len(inUse) > 0 && (stepEnabled(nf, v1alpha1.StepTaint) || stepEnabled(nf, v1alpha1.StepDeletePods)) {
		return pending(retryRelease, ReasonAttachmentsRemaining,
			"waiting for the pods still on the node that use the volumes of %s to go before detaching them: %s",
			countOf(len(inUse), "volume attachment"), firstFew(inUse))
	}
	req := providers.Request{Fence: nf, Method: m, Now: r.now()}
	for _, v := range vols {
		req.Volumes = append(req.Volumes, providers.Volume{Attachment: v.Attachment, Driver: v.Driver, Handle: v.Handle})
	}
	st, err := rel.ReleaseVolumes(ctx, req)
	if err != nil {
		msg := err.Error()
		if hint := providers.HintOf(err); hint != "" {
			msg += " (" + hint + ")"
		}
		retry := retryRelease
		if !providers.IsRetryable(err) {
			retry = retryStuck // a person must act: no write a second meanwhile
		}
		return pending(retry, string(providers.ReasonOf(err)), "force-detaching the volumes through method %s: %s", m.Name, msg)
	}
	if st.State == providers.Confirmed {
		return done("%s", st.Message)
	}
	retry := st.RetryAfter
	if retry <= 0 {
		retry = retryRelease
	}
	return pending(retry, string(st.Reason), "%s", st.Message)
}
