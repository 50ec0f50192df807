package pki

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/providers/agent/apiclient"
)

// What the controller's signer (package signer, which the agent does not link) expects of a
// request; a test checks that both sides agree.
const (
	SignerName        = "palisade.dev/agent"
	AgentOrganization = "palisade.dev:agents"
)

// The files in RequesterConfig.Dir.
const (
	CertFileName = "agent.crt"
	KeyFileName  = "agent.key"
	CAFileName   = "ca.crt"
)

// RequesterConfig says where the agent's certificate is kept and how it is requested.
type RequesterConfig struct {
	// Dir holds the certificate, key and CA bundle (CertFileName, KeyFileName, CAFileName).
	Dir string
	// APIServer is the API server's URL; TokenFile the pod's ServiceAccount token, re-read for
	// every request; APICAFile the API server's CA bundle.
	APIServer, TokenFile, APICAFile string
	// CAConfigMap is the namespace/name of the ConfigMap where the controller publishes its CA
	// bundle (key SecretCAKey).
	CAConfigMap string
	// CheckInterval is how often Run checks whether the certificate is due for renewal.
	CheckInterval time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Requester gets the agent's certificate through the CSR API and renews it.
type Requester struct {
	opts    RequesterConfig
	node    string
	api     *apiclient.Client
	log     logr.Logger
	now     func() time.Time
	pending *pendingCSR // a request not yet answered, waited on again rather than sent anew
	// notBefore holds renewals back after a refusal, so that a denied agent does not send a
	// request every check.
	notBefore time.Time
}

type pendingCSR struct {
	name string
	key  *ecdsa.PrivateKey
}

// NewRequester requests certificates for node.
func NewRequester(o RequesterConfig, node string, log logr.Logger) (*Requester, error) {
	api, err := apiclient.New(o.APIServer, o.TokenFile, o.APICAFile)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating --cert-dir: %w", err)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Requester{opts: o, node: node, api: api, log: log, now: now}, nil
}

// Paths are the certificate, key and CA bundle files.
func (r *Requester) Paths() (cert, key, ca string) {
	return filepath.Join(r.opts.Dir, CertFileName), filepath.Join(r.opts.Dir, KeyFileName), filepath.Join(r.opts.Dir, CAFileName)
}

// Ensure makes sure the files hold a usable certificate: it keeps files from an earlier run
// when they hold an unexpired certificate of this node (without calling the API server, which
// may be unreachable: the agent must heartbeat all the same), else it requests one, retrying
// transient failures until ctx ends. A denied request is an error.
func (r *Requester) Ensure(ctx context.Context) error {
	err := r.usable()
	if err == nil {
		err = r.chainsToPublishedCA(ctx)
	}
	if err == nil {
		r.log.Info("using the certificate from an earlier run", "dir", r.opts.Dir)
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		r.log.Info("requesting a new certificate", "reason", err.Error())
	}
	backoff := time.Second
	for {
		err := r.obtain(ctx)
		if err == nil || IsPermanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("requesting the agent certificate: %w", context.Cause(ctx))
		}
		r.log.Error(err, "requesting the agent certificate; retrying", "in", backoff.String())
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// usable checks the files: a key pair for this node, not expired, with a CA bundle.
func (r *Requester) usable() error {
	certFile, keyFile, caFile := r.Paths()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	if _, err := os.Stat(caFile); err != nil {
		return err
	}
	if cn := pair.Leaf.Subject.CommonName; cn != r.node {
		return fmt.Errorf("the certificate in --cert-dir is for node %q, this is %q", cn, r.node)
	}
	if !r.now().Before(pair.Leaf.NotAfter) {
		return fmt.Errorf("the certificate in --cert-dir expired at %s", pair.Leaf.NotAfter)
	}
	return nil
}

// chainsToPublishedCA checks the certificate in the files against the bundle the controller
// publishes now (after a CA rotation it no longer chains). When the bundle cannot be read
// within a few seconds it says nothing against the files: a node cut off from the API server
// keeps heartbeating with what it has.
func (r *Requester) chainsToPublishedCA(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ns, name, _ := strings.Cut(r.opts.CAConfigMap, "/")
	bundle, err := r.api.ConfigMapKey(ctx, ns, name, SecretCAKey)
	if err != nil {
		r.log.Info("cannot check the certificate from an earlier run against the published CA; using it", "reason", err.Error())
		return nil
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(bundle))
	certFile, keyFile, _ := r.Paths()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: r.now()}); err != nil {
		return fmt.Errorf("the certificate in --cert-dir does not chain to the CA published in %s (the CA was replaced?): %w", r.opts.CAConfigMap, err)
	}
	return nil
}

// Run renews the certificate past its half-life until ctx ends; a failure is logged and
// retried at the next check, the current certificate staying in use.
func (r *Requester) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.RenewIfDue(ctx); err != nil && ctx.Err() == nil {
			r.log.Error(err, "renewing the agent certificate; the current one stays in use, retrying", "in", r.opts.CheckInterval.String())
		}
	}
}

// RenewIfDue requests a new certificate when the current one is past its half-life, waiting
// for it at most a few check intervals.
func (r *Requester) RenewIfDue(ctx context.Context) error {
	certFile, _, _ := r.Paths()
	certPEM, _ := os.ReadFile(certFile)
	if !NeedsRenewal(certPEM, r.now()) || r.now().Before(r.notBefore) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*r.opts.CheckInterval)
	defer cancel()
	err := r.obtain(ctx)
	if IsPermanent(err) {
		r.notBefore = r.now().Add(10 * r.opts.CheckInterval)
	}
	return err
}

// permanentError is a refusal that asking again the same way will not change.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// IsPermanent says whether err is a refusal that asking again the same way will not change
// (a denied request, say).
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// obtain fetches the CA bundle, sends a CSR (or waits again on the one pending), waits for the
// certificate, checks it and writes the files: the bundle, then the key, then the certificate.
func (r *Requester) obtain(ctx context.Context) error {
	ns, name, _ := strings.Cut(r.opts.CAConfigMap, "/")
	bundle, err := r.api.ConfigMapKey(ctx, ns, name, SecretCAKey)
	if err != nil {
		return fmt.Errorf("getting the controller's CA bundle (is palisade-controller running with --agent-ca-secret, and may this ServiceAccount get that ConfigMap?): %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(bundle)) {
		return fmt.Errorf("ConfigMap %s key %s holds no PEM certificate", r.opts.CAConfigMap, SecretCAKey)
	}
	if r.pending == nil {
		if r.pending, err = r.send(ctx); err != nil {
			return err
		}
	}
	p := r.pending
	certPEM, err := r.wait(ctx, p.name)
	if err != nil {
		if IsPermanent(err) || apiclient.IsStatus(err, 404) {
			r.pending = nil // ask anew next time
		}
		return err
	}
	r.pending = nil
	if err := r.verify(certPEM, p.key, roots); err != nil {
		return permanentError{fmt.Errorf("CertificateSigningRequest %s: %w", p.name, err)}
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(p.key)
	if err != nil {
		return fmt.Errorf("encoding the agent key: %w", err)
	}
	certFile, keyFile, caFile := r.Paths()
	if err := WriteFileAtomic(caFile, []byte(bundle)); err != nil {
		return err
	}
	pair := KeyPair{CertPEM: certPEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
	if err := pair.WriteFiles(certFile, keyFile); err != nil {
		return err
	}
	r.log.Info("got a new agent certificate", "csr", p.name, "dir", r.opts.Dir)
	return nil
}

// send makes a new key and sends its CSR.
func (r *Requester) send(ctx context.Context) (*pendingCSR, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the agent key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: r.node, Organization: []string{AgentOrganization}},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("making the certificate request: %w", err)
	}
	csr := &apiclient.CSR{
		APIVersion: "certificates.k8s.io/v1", Kind: "CertificateSigningRequest",
		Metadata: apiclient.ObjectMeta{GenerateName: "palisade-agent-" + r.node + "-"},
		Spec: apiclient.CSRSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: SignerName, Usages: []string{"digital signature", "client auth"},
		},
	}
	created, err := r.api.CreateCSR(ctx, csr)
	if err != nil {
		if apiclient.IsStatus(err, 403) {
			return nil, permanentError{fmt.Errorf("%w (the agent's ServiceAccount needs create, get and watch on certificatesigningrequests)", err)}
		}
		return nil, err
	}
	r.log.Info("sent a certificate signing request, waiting for the controller to sign it", "csr", created.Metadata.Name, "signer", SignerName)
	return &pendingCSR{name: created.Metadata.Name, key: key}, nil
}

// wait returns the certificate once the CSR has one; a denied or failed CSR is a
// permanentError with the signer's message.
func (r *Requester) wait(ctx context.Context, name string) ([]byte, error) {
	var cert []byte
	var denial error
	decided := func(csr *apiclient.CSR) bool {
		for _, c := range csr.Status.Conditions {
			if (c.Type == "Denied" || c.Type == "Failed") && c.Status == "True" {
				denial = permanentError{fmt.Errorf("CertificateSigningRequest %s %s by the controller (%s): %s", name, strings.ToLower(c.Type), c.Reason, c.Message)}
				return true
			}
		}
		cert = csr.Status.Certificate
		return len(cert) > 0
	}
	for {
		csr, err := r.api.GetCSR(ctx, name)
		if err != nil {
			return nil, err
		}
		if decided(csr) {
			return cert, denial
		}
		if err := r.api.WatchCSR(ctx, name, csr.Metadata.ResourceVersion, decided); err != nil && ctx.Err() == nil {
			r.log.V(1).Info("watch of the certificate signing request ended", "csr", name, "error", err.Error())
			select { // not a tight loop when watching fails at once
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		if denial != nil || len(cert) > 0 {
			return cert, denial
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for CertificateSigningRequest %s to be signed (is palisade-controller running?): %w", name, context.Cause(ctx))
		}
	}
}

// verify checks that the signed certificate is the one asked for: this node, the request's
// key, a client certificate of the published CA.
func (r *Requester) verify(certPEM []byte, key *ecdsa.PrivateKey, roots *x509.CertPool) error {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return errors.New("status.certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("parsing the signed certificate: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return errors.New("the signed certificate is not for the request's key")
	}
	if cert.Subject.CommonName != r.node {
		return fmt.Errorf("the signed certificate is for node %q, not %q", cert.Subject.CommonName, r.node)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: r.now()}); err != nil {
		return fmt.Errorf("the signed certificate is not a client certificate of the CA in --ca-configmap %s (has the CA been replaced? restart the agent): %w", r.opts.CAConfigMap, err)
	}
	return nil
}

// Request makes sure o.Dir holds a certificate for node (see Ensure), starts renewing it in the
// background until ctx ends, and returns the files for the heartbeat client.
func Request(ctx context.Context, o RequesterConfig, node string, log logr.Logger) (cert, key, ca string, err error) {
	r, err := NewRequester(o, node, log)
	if err != nil {
		return "", "", "", err
	}
	if err := r.Ensure(ctx); err != nil {
		return "", "", "", err
	}
	go r.Run(ctx)
	cert, key, ca = r.Paths()
	return cert, key, ca, nil
}
