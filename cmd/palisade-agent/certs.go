package main

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
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/providers/agent/pki"
)

// What the controller's signer (package providers/agent/pki/signer, which the agent does not link)
// expects of a request; a test checks that both sides agree.
const (
	signerName        = "palisade.dev/agent"
	agentOrganization = "palisade.dev:agents"
)

// The files in --cert-dir.
const (
	certFileName = "agent.crt"
	keyFileName  = "agent.key"
	caFileName   = "ca.crt"
)

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// certOptions configure how the agent gets its client certificate through the Kubernetes
// CertificateSigningRequest API, with its pod's ServiceAccount token.
type certOptions struct {
	request                         bool
	dir                             string
	apiServer, tokenFile, apiCAFile string
	caConfigMap                     string // namespace/name
	checkInterval                   time.Duration
}

func (c *certOptions) addFlags(fs *flag.FlagSet) {
	apiServer := ""
	if host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"); host != "" && port != "" {
		apiServer = "https://" + net.JoinHostPort(host, port)
	}
	ns := "default"
	if b, err := os.ReadFile(filepath.Join(serviceAccountDir, "namespace")); err == nil {
		ns = strings.TrimSpace(string(b))
	}
	fs.BoolVar(&c.request, "request-certificate", false, "get the client certificate through a CertificateSigningRequest (signer "+signerName+") with the pod's ServiceAccount token, keep it in --cert-dir and renew it past half-life; replaces --cert, --key and --ca")
	fs.StringVar(&c.dir, "cert-dir", "/var/lib/palisade-agent/pki", "directory of the requested certificate ("+certFileName+", "+keyFileName+", "+caFileName+")")
	fs.StringVar(&c.apiServer, "api-server", apiServer, "URL of the Kubernetes API server for certificate requests (default from $KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT)")
	fs.StringVar(&c.tokenFile, "api-token-file", filepath.Join(serviceAccountDir, "token"), "ServiceAccount token for certificate requests (re-read for every request); it must be bound to this pod, as the projected token is")
	fs.StringVar(&c.apiCAFile, "api-ca-file", filepath.Join(serviceAccountDir, "ca.crt"), "CA bundle of the API server")
	fs.StringVar(&c.caConfigMap, "ca-configmap", ns+"/palisade-agent-ca", "namespace/name of the ConfigMap where the controller publishes the CA bundle (key "+pki.SecretCAKey+") its certificate chains to")
	c.checkInterval = time.Minute
}

// validate reports flags that contradict --request-certificate.
func (c *certOptions) validate(cert, key, ca string) error {
	if !c.request {
		return nil
	}
	if cert != "" || key != "" || ca != "" {
		return errors.New("--cert, --key and --ca cannot be combined with --request-certificate (the requested files are in --cert-dir)")
	}
	if c.dir == "" {
		return errors.New("--cert-dir is required with --request-certificate")
	}
	if ns, name, ok := strings.Cut(c.caConfigMap, "/"); !ok || ns == "" || name == "" {
		return fmt.Errorf("--ca-configmap %q is not namespace/name", c.caConfigMap)
	}
	return nil
}

// certRequester gets the agent's certificate through the CSR API and renews it.
type certRequester struct {
	opts    certOptions
	node    string
	api     *apiClient
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

func newCertRequester(o certOptions, node string, log logr.Logger) (*certRequester, error) {
	api, err := newAPIClient(o.apiServer, o.tokenFile, o.apiCAFile)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating --cert-dir: %w", err)
	}
	return &certRequester{opts: o, node: node, api: api, log: log, now: time.Now}, nil
}

// paths are the certificate, key and CA bundle files.
func (r *certRequester) paths() (cert, key, ca string) {
	return filepath.Join(r.opts.dir, certFileName), filepath.Join(r.opts.dir, keyFileName), filepath.Join(r.opts.dir, caFileName)
}

// ensure makes sure the files hold a usable certificate: it keeps files from an earlier run
// when they hold an unexpired certificate of this node (without calling the API server, which
// may be unreachable: the agent must heartbeat all the same), else it requests one, retrying
// transient failures until ctx ends. A denied request is an error.
func (r *certRequester) ensure(ctx context.Context) error {
	err := r.usable()
	if err == nil {
		err = r.chainsToPublishedCA(ctx)
	}
	if err == nil {
		r.log.Info("using the certificate from an earlier run", "dir", r.opts.dir)
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		r.log.Info("requesting a new certificate", "reason", err.Error())
	}
	backoff := time.Second
	for {
		err := r.obtain(ctx)
		if err == nil || isPermanent(err) {
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
func (r *certRequester) usable() error {
	certFile, keyFile, caFile := r.paths()
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
func (r *certRequester) chainsToPublishedCA(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ns, name, _ := strings.Cut(r.opts.caConfigMap, "/")
	bundle, err := r.api.getConfigMapKey(ctx, ns, name, pki.SecretCAKey)
	if err != nil {
		r.log.Info("cannot check the certificate from an earlier run against the published CA; using it", "reason", err.Error())
		return nil
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(bundle))
	certFile, keyFile, _ := r.paths()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: r.now()}); err != nil {
		return fmt.Errorf("the certificate in --cert-dir does not chain to the CA published in %s (the CA was replaced?): %w", r.opts.caConfigMap, err)
	}
	return nil
}

// run renews the certificate past its half-life until ctx ends; a failure is logged and
// retried at the next check, the current certificate staying in use.
func (r *certRequester) run(ctx context.Context) {
	t := time.NewTicker(r.opts.checkInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.renewIfDue(ctx); err != nil && ctx.Err() == nil {
			r.log.Error(err, "renewing the agent certificate; the current one stays in use, retrying", "in", r.opts.checkInterval.String())
		}
	}
}

// renewIfDue requests a new certificate when the current one is past its half-life, waiting
// for it at most a few check intervals.
func (r *certRequester) renewIfDue(ctx context.Context) error {
	certFile, _, _ := r.paths()
	certPEM, _ := os.ReadFile(certFile)
	if !pki.NeedsRenewal(certPEM, r.now()) || r.now().Before(r.notBefore) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*r.opts.checkInterval)
	defer cancel()
	err := r.obtain(ctx)
	if isPermanent(err) {
		r.notBefore = r.now().Add(10 * r.opts.checkInterval)
	}
	return err
}

// permanentError is a refusal that asking again the same way will not change.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// obtain fetches the CA bundle, sends a CSR (or waits again on the one pending), waits for the
// certificate, checks it and writes the files: the bundle, then the key, then the certificate.
func (r *certRequester) obtain(ctx context.Context) error {
	ns, name, _ := strings.Cut(r.opts.caConfigMap, "/")
	bundle, err := r.api.getConfigMapKey(ctx, ns, name, pki.SecretCAKey)
	if err != nil {
		return fmt.Errorf("getting the controller's CA bundle (is palisade-controller running with --agent-ca-secret, and may this ServiceAccount get that ConfigMap?): %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(bundle)) {
		return fmt.Errorf("ConfigMap %s key %s holds no PEM certificate", r.opts.caConfigMap, pki.SecretCAKey)
	}
	if r.pending == nil {
		if r.pending, err = r.send(ctx); err != nil {
			return err
		}
	}
	p := r.pending
	certPEM, err := r.wait(ctx, p.name)
	if err != nil {
		if isPermanent(err) || isAPIError(err, 404) {
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
	certFile, keyFile, caFile := r.paths()
	if err := pki.WriteFileAtomic(caFile, []byte(bundle)); err != nil {
		return err
	}
	pair := pki.KeyPair{CertPEM: certPEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
	if err := pair.WriteFiles(certFile, keyFile); err != nil {
		return err
	}
	r.log.Info("got a new agent certificate", "csr", p.name, "dir", r.opts.dir)
	return nil
}

// send makes a new key and sends its CSR.
func (r *certRequester) send(ctx context.Context) (*pendingCSR, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the agent key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: r.node, Organization: []string{agentOrganization}},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("making the certificate request: %w", err)
	}
	csr := &csrObject{
		APIVersion: "certificates.k8s.io/v1", Kind: "CertificateSigningRequest",
		Metadata: objectMeta{GenerateName: "palisade-agent-" + r.node + "-"},
		Spec: csrSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: signerName, Usages: []string{"digital signature", "client auth"},
		},
	}
	created, err := r.api.createCSR(ctx, csr)
	if err != nil {
		if isAPIError(err, 403) {
			return nil, permanentError{fmt.Errorf("%w (the agent's ServiceAccount needs create, get and watch on certificatesigningrequests)", err)}
		}
		return nil, err
	}
	r.log.Info("sent a certificate signing request, waiting for the controller to sign it", "csr", created.Metadata.Name, "signer", signerName)
	return &pendingCSR{name: created.Metadata.Name, key: key}, nil
}

// wait returns the certificate once the CSR has one; a denied or failed CSR is a
// permanentError with the signer's message.
func (r *certRequester) wait(ctx context.Context, name string) ([]byte, error) {
	var cert []byte
	var denial error
	decided := func(csr *csrObject) bool {
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
		csr, err := r.api.getCSR(ctx, name)
		if err != nil {
			return nil, err
		}
		if decided(csr) {
			return cert, denial
		}
		if err := r.api.watchCSR(ctx, name, csr.Metadata.ResourceVersion, decided); err != nil && ctx.Err() == nil {
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
func (r *certRequester) verify(certPEM []byte, key *ecdsa.PrivateKey, roots *x509.CertPool) error {
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
		return fmt.Errorf("the signed certificate is not a client certificate of the CA in --ca-configmap %s (has the CA been replaced? restart the agent): %w", r.opts.caConfigMap, err)
	}
	return nil
}

// requestCertificate makes sure --cert-dir holds a certificate (see ensure), starts renewing it
// in the background until ctx ends, and returns the files for the heartbeat client.
func requestCertificate(ctx context.Context, o certOptions, node string, log logr.Logger) (cert, key, ca string, err error) {
	r, err := newCertRequester(o, node, log)
	if err != nil {
		return "", "", "", err
	}
	if err := r.ensure(ctx); err != nil {
		return "", "", "", err
	}
	go r.run(ctx)
	cert, key, ca = r.paths()
	return cert, key, ca, nil
}
