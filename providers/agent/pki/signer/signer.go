package signer

import (
	"context"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"palisade.dev/palisade/providers/agent/pki"
)

// Reasons of the conditions Signer sets on CSRs.
const (
	ReasonApproved = "PalisadeAgentApproved"
	ReasonDenied   = "PalisadeAgentRequestInvalid"
	ReasonFailed   = "PalisadeAgentSigningFailed"
)

// Signer approves and signs the agents' CSRs (signerName SignerName) that pass Check, and
// denies the others with the reason in the Denied condition's message.
type Signer struct {
	Client client.Client
	// CA signs the certificates.
	CA *pki.CA
	// AgentUser is the user name of the agents' ServiceAccount (ServiceAccountUser).
	AgentUser string
	// Now defaults to time.Now.
	Now func() time.Time
}

// SetupWithManager registers the Signer for the CSRs of SignerName only.
func (s *Signer) SetupWithManager(mgr ctrl.Manager) error {
	if s.Now == nil {
		s.Now = time.Now
	}
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		csr, ok := o.(*certificatesv1.CertificateSigningRequest)
		return ok && csr.Spec.SignerName == SignerName
	})
	return ctrl.NewControllerManagedBy(mgr).Named("agent-csr").
		For(&certificatesv1.CertificateSigningRequest{}, builder.WithPredicates(ours)).
		Complete(s)
}

// Reconcile decides one CSR: denied, or approved then signed. A decided CSR is left alone,
// except that an approved one without a certificate is signed if it passes Check.
func (s *Signer) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	csr := &certificatesv1.CertificateSigningRequest{}
	if err := s.Client.Get(ctx, req.NamespacedName, csr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if csr.Spec.SignerName != SignerName {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("CertificateSigningRequest", klog.KObj(csr), "requester", csr.Spec.Username)
	ctx = ctrl.LoggerInto(ctx, log)
	if has(csr, certificatesv1.CertificateDenied) || has(csr, certificatesv1.CertificateFailed) || len(csr.Status.Certificate) > 0 {
		return ctrl.Result{}, nil
	}
	x509Req, node, checkErr := Check(csr, s.AgentUser)
	switch {
	case !has(csr, certificatesv1.CertificateApproved) && checkErr != nil:
		log.Info("denying agent certificate request", "reason", checkErr.Error())
		return ctrl.Result{}, s.decide(ctx, csr, certificatesv1.CertificateDenied, ReasonDenied, checkErr.Error())
	case checkErr != nil: // approved by someone else
		return ctrl.Result{}, s.fail(ctx, csr, "approved, but not signed: "+checkErr.Error())
	case !has(csr, certificatesv1.CertificateApproved):
		msg := fmt.Sprintf("the agent's ServiceAccount asked for the certificate of node %s, where its pod runs", node)
		if err := s.decide(ctx, csr, certificatesv1.CertificateApproved, ReasonApproved, msg); err != nil {
			return ctrl.Result{}, err
		}
	}
	pem, err := Sign(s.CA, x509Req, node, s.Now())
	if err != nil {
		return ctrl.Result{}, s.fail(ctx, csr, err.Error())
	}
	csr.Status.Certificate = pem
	if err := s.Client.SubResource("status").Update(ctx, csr); err != nil {
		return ctrl.Result{}, fmt.Errorf("storing the signed certificate in CSR %s: %w", csr.Name, err)
	}
	log.Info("signed agent certificate", "Node", klog.KRef("", node))
	return ctrl.Result{}, nil
}

// decide adds an Approved or Denied condition through the approval subresource.
func (s *Signer) decide(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType, reason, msg string) error {
	setCondition(csr, typ, reason, msg, s.Now())
	if err := s.Client.SubResource("approval").Update(ctx, csr); err != nil {
		return fmt.Errorf("setting condition %s on CSR %s: %w", typ, csr.Name, err)
	}
	return nil
}

// fail adds a Failed condition through the status subresource.
func (s *Signer) fail(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, msg string) error {
	ctrl.LoggerFrom(ctx).Info("not signing approved agent certificate request", "reason", msg)
	setCondition(csr, certificatesv1.CertificateFailed, ReasonFailed, msg, s.Now())
	if err := s.Client.SubResource("status").Update(ctx, csr); err != nil {
		return fmt.Errorf("setting condition Failed on CSR %s: %w", csr.Name, err)
	}
	return nil
}

func setCondition(csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType, reason, msg string, now time.Time) {
	t := metav1.NewTime(now)
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastUpdateTime: t, LastTransitionTime: t,
	})
}

func has(csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
