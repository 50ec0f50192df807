package signer

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/providers/agent/pki"
)

// EnsureCA returns the CA kept in the Secret key (keys pki.SecretCertKey and
// pki.SecretKeyKey), first creating the Secret with a new CA when there is none. Replicas
// starting together all end up with the CA of the one whose create won.
func EnsureCA(ctx context.Context, c client.Client, key types.NamespacedName) (*pki.CA, error) {
	s := &corev1.Secret{}
	err := c.Get(ctx, key, s)
	if apierrors.IsNotFound(err) {
		if err = createCA(ctx, c, key); err == nil || apierrors.IsAlreadyExists(err) {
			err = c.Get(ctx, key, s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("getting the agents' CA from Secret %s: %w", key, err)
	}
	ca, err := pki.LoadCA(s.Data[pki.SecretCertKey], s.Data[pki.SecretKeyKey])
	if err != nil {
		return nil, fmt.Errorf("the Secret %s holds no usable CA (%w): delete it so that the controller makes a new CA on its next start, then restart the agents", key, err)
	}
	return ca, nil
}

func createCA(ctx context.Context, c client.Client, key types.NamespacedName) error {
	ca, err := pki.NewCA()
	if err != nil {
		return err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{"app.kubernetes.io/part-of": "palisade"}},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{pki.SecretCertKey: ca.CertPEM(), pki.SecretKeyKey: keyPEM},
	}
	if err := c.Create(ctx, s); err != nil {
		return fmt.Errorf("creating Secret %s for the agents' CA: %w", key, err)
	}
	return nil
}

// PublishBundle makes the ConfigMap key hold the CA certificate under pki.SecretCAKey, the
// bundle agents verify the controller against; it creates or updates it as needed.
func PublishBundle(ctx context.Context, c client.Client, key types.NamespacedName, ca *pki.CA) error {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{"app.kubernetes.io/part-of": "palisade"}},
			Data:       map[string]string{pki.SecretCAKey: string(ca.CertPEM())},
		}
		err = c.Create(ctx, cm)
		if apierrors.IsAlreadyExists(err) {
			return PublishBundle(ctx, c, key, ca)
		}
	case err == nil && cm.Data[pki.SecretCAKey] != string(ca.CertPEM()):
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[pki.SecretCAKey] = string(ca.CertPEM())
		err = c.Update(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("publishing the agents' CA bundle in ConfigMap %s: %w", key, err)
	}
	return nil
}

// ServerCert keeps the controller's heartbeat-server certificate in files: issued by CA for
// Hosts, with the CA bundle beside it, reissued once past its half-life (the server re-reads
// the files on every handshake).
type ServerCert struct {
	CA                        *pki.CA
	Hosts                     []string
	CertFile, KeyFile, CAFile string
	// CheckInterval is how often Start checks the certificate; default one minute.
	CheckInterval time.Duration
	Log           logr.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Ensure writes a new certificate unless the files already hold one of CA for Hosts that is
// not past its half-life, and the CA bundle.
func (s *ServerCert) Ensure() error {
	if s.current() {
		return nil
	}
	for _, f := range []string{s.CertFile, s.KeyFile, s.CAFile} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return fmt.Errorf("creating the directory of %s: %w", f, err)
		}
	}
	if err := pki.WriteFileAtomic(s.CAFile, s.CA.CertPEM()); err != nil {
		return err
	}
	pair, err := s.CA.IssueServer(s.Hosts)
	if err != nil {
		return err
	}
	if err := pair.WriteFiles(s.CertFile, s.KeyFile); err != nil {
		return err
	}
	if s.Log.GetSink() != nil {
		s.Log.Info("issued the heartbeat server certificate", "hosts", s.Hosts, "file", s.CertFile)
	}
	return nil
}

// current says whether the files hold what Ensure would write.
func (s *ServerCert) current() bool {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	bundle, err := os.ReadFile(s.CAFile)
	if err != nil || !bytes.Equal(bundle, s.CA.CertPEM()) {
		return false
	}
	certPEM, err := os.ReadFile(s.CertFile)
	if err != nil || pki.NeedsRenewal(certPEM, now()) {
		return false
	}
	if _, err := os.Stat(s.KeyFile); err != nil {
		return false
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || cert.CheckSignatureFrom(s.CA.Cert) != nil {
		return false
	}
	var hosts []string
	for _, ip := range cert.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	hosts = append(hosts, cert.DNSNames...)
	want := slices.Clone(s.Hosts)
	slices.Sort(hosts)
	slices.Sort(want)
	return slices.Equal(hosts, want)
}

// Start checks the certificate every CheckInterval until ctx is done (a controller-runtime
// Runnable, on every replica: each serves with its own certificate). A failure is logged and
// retried at the next check: the current certificate stays valid for half its life.
func (s *ServerCert) Start(ctx context.Context) error {
	interval := s.CheckInterval
	if interval <= 0 {
		interval = time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := s.Ensure(); err != nil && s.Log.GetSink() != nil {
			s.Log.Error(err, "renewing the heartbeat server certificate; retrying at the next check")
		}
	}
}

// NeedLeaderElection is false: every replica keeps its certificate current.
func (s *ServerCert) NeedLeaderElection() bool { return false }
