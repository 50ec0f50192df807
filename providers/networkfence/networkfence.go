// Package networkfence is the storage fence through csi-addons (method type NetworkFence): a
// NetworkFence object (csiaddons.openshift.io/v1alpha1) for the node's addresses, which the
// csi-addons manager hands, through the storage's CSI-Addons sidecar, to its CSI driver, which
// has the storage refuse those addresses. The fence is confirmed only when the NetworkFence's
// status says the fence Succeeded; it is lifted (Unfence) by setting the object Unfenced,
// waiting for the unfence to succeed, and deleting it.
//
// Every fence has its own object, named after the node, the method and the NodeFence's UID, so
// a status is never one left by an earlier fence or by its lifting. The object has no owner
// reference: deleting the NodeFence must never let the garbage collector delete a fence that
// still holds (deleting a NetworkFence does not lift it at the storage either).
package networkfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	csiaddonsv1alpha1 "github.com/csi-addons/kubernetes-csi-addons/api/csiaddons/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

const (
	// ProviderName is the provider's name in metrics and records.
	ProviderName = "networkfence"
	// ParameterToken is the NetworkFence parameter carrying the fence's fencing token to the
	// CSI driver, which may refuse a fence or an unfence older than one it carried out.
	ParameterToken = "fencing.palisade.dev/token"
	// recheck is how often a fence or its lifting is read back while the manager works on it:
	// its round trip (the manager sees the object, calls the sidecar, which calls the driver,
	// and writes the status) takes about 0.1 s.
	recheck = 250 * time.Millisecond
)

// Labels and annotations Palisade puts on the NetworkFences it creates.
const (
	// LabelManagedBy marks the NetworkFences Palisade created.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "palisade"
	// AnnotationNodeFence names the NodeFence (the node) a NetworkFence fences.
	AnnotationNodeFence = "palisade.dev/nodefence"
	// AnnotationMethod names the policy's method that created it.
	AnnotationMethod = "palisade.dev/method"
)

var (
	_ providers.Fencer   = (*Provider)(nil)
	_ providers.Unfencer = (*Provider)(nil)
)

// hints tell an operator what to look at.
var hints = map[providers.Reason]string{
	providers.ReasonBadTarget:           "Fix what the message names (the method's networkFenceClassName, the node's addresses or its palisade.dev/storage-cidrs annotation), then delete this NodeFence to try again.",
	providers.ReasonStorageRefused:      "The storage's CSI driver refused: see the NetworkFence's status and the csi-addons sidecar's log next to the driver.",
	providers.ReasonStorageFenceRemoved: "Someone deleted or changed the NetworkFence Palisade created: the storage may serve the node again. The chain's next method fences the node.",
	providers.ReasonAPIError:            "The API server did not answer: Palisade tries again.",
}

// Provider is the NetworkFence Fencer. It is safe for concurrent use.
type Provider struct {
	// writer creates, updates and deletes NetworkFences.
	writer client.Writer
	// reader reads Nodes, NetworkFences and NetworkFenceClasses straight from the API server,
	// so that a cluster without csi-addons costs no informer.
	reader client.Reader
}

// New returns a NetworkFence provider. The scheme of writer and reader must hold csi-addons'
// types (csiaddonsv1alpha1.AddToScheme).
func New(writer client.Writer, reader client.Reader) *Provider {
	return &Provider{writer: writer, reader: reader}
}

// Name is "networkfence".
func (p *Provider) Name() string { return ProviderName }

// ObjectName is the name of the NetworkFence of one fence through one method:
// palisade-<node>-<method>-<first 8 characters of the NodeFence's UID>, or
// palisade-<UID>-<method> when that is too long for a name.
func ObjectName(req providers.Request) string {
	uid := string(req.Fence.UID)
	name := fmt.Sprintf("palisade-%s-%s-%s", req.Node(), req.Method.Name, uid[:min(8, len(uid))])
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	return fmt.Sprintf("palisade-%s-%s", uid, req.Method.Name)
}

// Fence creates the fence's NetworkFence (again, if need be: creating it twice is a no-op).
func (p *Provider) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	class, err := p.class(ctx, req)
	if err != nil {
		return failure(err)
	}
	cidrs, err := StorageCIDRs(ctx, p.reader, req.Node())
	if err != nil {
		return failure(err)
	}
	name := ObjectName(req)
	got := &csiaddonsv1alpha1.NetworkFence{}
	switch err := p.reader.Get(ctx, client.ObjectKey{Name: name}, got); {
	case err == nil:
		if got.Spec.FenceState != csiaddonsv1alpha1.Fenced || !got.DeletionTimestamp.IsZero() {
			return removed(name, got)
		}
		return providers.Status{State: providers.InProgress, Message: fmt.Sprintf("NetworkFence %s (class %s, driver %s) already asks the storage to refuse %s",
			name, class.Name, class.Spec.Provisioner, strings.Join(got.Spec.Cidrs, ", "))}, nil
	case !apierrors.IsNotFound(err):
		return failure(apiError("reading NetworkFence "+name, err))
	}
	obj := &csiaddonsv1alpha1.NetworkFence{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{LabelManagedBy: managedBy},
			Annotations: map[string]string{
				AnnotationNodeFence: req.Fence.Name,
				AnnotationMethod:    req.Method.Name,
			},
		},
		Spec: csiaddonsv1alpha1.NetworkFenceSpec{
			NetworkFenceClassName: class.Name,
			FenceState:            csiaddonsv1alpha1.Fenced,
			Cidrs:                 cidrs,
		},
	}
	if errs := validation.IsValidLabelValue(req.Node()); len(errs) == 0 {
		obj.Labels[v1alpha1.LabelNode] = req.Node()
	}
	if t := req.Fence.Status.Token; t > 0 {
		obj.Spec.Parameters = map[string]string{ParameterToken: strconv.FormatInt(t, 10)}
	}
	if err := p.writer.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return failure(apiError("creating NetworkFence "+name, err))
	}
	return providers.Status{State: providers.InProgress, Message: fmt.Sprintf("NetworkFence %s created: class %s (driver %s) asked to have the storage refuse %s",
		name, class.Name, class.Spec.Provisioner, strings.Join(cidrs, ", "))}, nil
}

// Check reads the NetworkFence back: Confirmed only when the csi-addons manager reports the
// fence operation Succeeded for it.
func (p *Provider) Check(ctx context.Context, req providers.Request) (providers.Status, error) {
	name := ObjectName(req)
	nf := &csiaddonsv1alpha1.NetworkFence{}
	if err := p.reader.Get(ctx, client.ObjectKey{Name: name}, nf); err != nil {
		if apierrors.IsNotFound(err) {
			return removed(name, nil)
		}
		return failure(apiError("reading NetworkFence "+name, err))
	}
	if nf.Spec.FenceState != csiaddonsv1alpha1.Fenced || !nf.DeletionTimestamp.IsZero() {
		return removed(name, nf)
	}
	cidrs := strings.Join(nf.Spec.Cidrs, ", ")
	switch {
	case nf.Status.Result == csiaddonsv1alpha1.FencingOperationResultSucceeded && nf.Status.Message == csiaddonsv1alpha1.FenceOperationSuccessfulMessage:
		return providers.Status{State: providers.Confirmed, Message: fmt.Sprintf("the storage refuses %s: NetworkFence %s (class %s) reads %s, %q",
			cidrs, name, nf.Spec.NetworkFenceClassName, nf.Status.Result, nf.Status.Message)}, nil
	case nf.Status.Result == csiaddonsv1alpha1.FencingOperationResultFailed:
		st := providers.Status{State: providers.InProgress, Reason: providers.ReasonStorageRefused, RetryAfter: recheck,
			Message: fmt.Sprintf("the storage refused to fence %s (NetworkFence %s, class %s): %s; the csi-addons manager tries again",
				cidrs, name, nf.Spec.NetworkFenceClassName, nf.Status.Message)}
		if req.Expired {
			st.State = providers.Failed
		}
		return st, nil
	}
	return providers.Status{State: providers.InProgress, RetryAfter: recheck,
		Message: fmt.Sprintf("NetworkFence %s for %s not carried out yet: is the csi-addons manager running, and the CSI driver's csi-addons sidecar of class %s?",
			name, cidrs, nf.Spec.NetworkFenceClassName)}, nil
}

// End has nothing to drop: the NetworkFence stays, the fence holding, until Unfence.
func (p *Provider) End(context.Context, providers.Request) error { return nil }

// Unfence lifts the fence: the NetworkFence is set Unfenced, deleted once the manager reports
// the unfence Succeeded, and the fence counts as lifted once the object is gone.
func (p *Provider) Unfence(ctx context.Context, req providers.Request) (providers.Status, error) {
	name := ObjectName(req)
	nf := &csiaddonsv1alpha1.NetworkFence{}
	if err := p.reader.Get(ctx, client.ObjectKey{Name: name}, nf); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return providers.Status{State: providers.Confirmed, Message: fmt.Sprintf("no NetworkFence %s is left", name)}, nil
		}
		return providers.Status{}, apiError("reading NetworkFence "+name, err)
	}
	cidrs := strings.Join(nf.Spec.Cidrs, ", ")
	wait := func(reason providers.Reason, format string, args ...any) (providers.Status, error) {
		return providers.Status{State: providers.InProgress, Reason: reason, RetryAfter: recheck, Message: fmt.Sprintf(format, args...)}, nil
	}
	switch {
	case !nf.DeletionTimestamp.IsZero():
		return wait("", "NetworkFence %s (unfenced) is being deleted", name)
	case nf.Spec.FenceState == csiaddonsv1alpha1.Fenced:
		nf.Spec.FenceState = csiaddonsv1alpha1.Unfenced
		if err := p.writer.Update(ctx, nf); err != nil {
			return providers.Status{}, apiError("setting NetworkFence "+name+" Unfenced", err)
		}
		return wait("", "NetworkFence %s set Unfenced: the storage is asked to serve %s again", name, cidrs)
	case nf.Status.Result == csiaddonsv1alpha1.FencingOperationResultSucceeded && nf.Status.Message == csiaddonsv1alpha1.UnFenceOperationSuccessfulMessage:
		if err := p.writer.Delete(ctx, nf); err != nil && !apierrors.IsNotFound(err) {
			return providers.Status{}, apiError("deleting NetworkFence "+name, err)
		}
		return wait("", "the storage serves %s again; NetworkFence %s deleted", cidrs, name)
	case nf.Status.Result == csiaddonsv1alpha1.FencingOperationResultFailed:
		return wait(providers.ReasonStorageRefused, "the storage refused to lift the fence of %s (NetworkFence %s): %s; the csi-addons manager tries again", cidrs, name, nf.Status.Message)
	}
	return wait("", "NetworkFence %s set Unfenced, not carried out yet", name)
}

// class reads the method's NetworkFenceClass.
func (p *Provider) class(ctx context.Context, req providers.Request) (*csiaddonsv1alpha1.NetworkFenceClass, error) {
	s := req.Method.NetworkFence
	if s == nil || s.NetworkFenceClassName == "" {
		return nil, badTarget("method %s has no networkFence.networkFenceClassName", req.Method.Name)
	}
	class := &csiaddonsv1alpha1.NetworkFenceClass{}
	err := p.reader.Get(ctx, client.ObjectKey{Name: s.NetworkFenceClassName}, class)
	switch {
	case err == nil:
		return class, nil
	case meta.IsNoMatchError(err):
		return nil, badTarget("csi-addons is not installed: the API server serves no NetworkFenceClass (csiaddons.openshift.io/v1alpha1)")
	case apierrors.IsNotFound(err):
		return nil, badTarget("NetworkFenceClass %s (method %s) does not exist", s.NetworkFenceClassName, req.Method.Name)
	}
	return nil, apiError("reading NetworkFenceClass "+s.NetworkFenceClassName, err)
}

// removed answers a fence whose NetworkFence is gone or no longer Fenced: someone else lifted
// or deleted it.
func removed(name string, nf *csiaddonsv1alpha1.NetworkFence) (providers.Status, error) {
	what := "was deleted"
	if nf != nil {
		what = fmt.Sprintf("is %s", nf.Spec.FenceState)
		if !nf.DeletionTimestamp.IsZero() {
			what = "is being deleted"
		}
	}
	return providers.Status{State: providers.Failed, Reason: providers.ReasonStorageFenceRemoved,
		Message: fmt.Sprintf("NetworkFence %s %s, not by this fence: the storage may serve the node again. %s", name, what, hints[providers.ReasonStorageFenceRemoved])}, nil
}

// failure turns a lasting error (BadTarget) into a Failed status that says what to fix, and
// passes any other error on.
func failure(err error) (providers.Status, error) {
	if providers.IsRetryable(err) {
		return providers.Status{}, err
	}
	r := providers.ReasonOf(err)
	return providers.Status{State: providers.Failed, Reason: r, Message: fmt.Sprintf("%v. %s", errors.Unwrap(err), hints[r])}, nil
}

func badTarget(format string, args ...any) error {
	return providers.NewError(providers.ReasonBadTarget, fmt.Errorf(format, args...))
}

func apiError(what string, err error) error {
	return providers.WithHint(providers.NewError(providers.ReasonAPIError, fmt.Errorf("%s: %w", what, err)), hints[providers.ReasonAPIError])
}
