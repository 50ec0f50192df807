package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

const (
	// DefaultLeafValidity is how long issued server and agent certificates are valid.
	DefaultLeafValidity = 24 * time.Hour
	// DefaultCAValidity is how long a CA made by NewCA is valid.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// ClockSkew backdates NotBefore so that a node whose clock is a little behind accepts a
	// freshly issued certificate.
	ClockSkew = 5 * time.Minute
)

// Keys of the Secrets holding the CA and the issued certificates (the kubernetes.io/tls layout,
// plus the CA bundle).
const (
	SecretCertKey = "tls.crt"
	SecretKeyKey  = "tls.key"
	SecretCAKey   = "ca.crt"
)

// CA is the small certificate authority of the heartbeat channel: it signs the controller's
// server certificate and one client certificate per node agent.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// LeafValidity is how long issued certificates are valid; zero means DefaultLeafValidity.
	LeafValidity time.Duration
}

// KeyPair is an issued certificate and its private key, PEM-encoded.
type KeyPair struct {
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed ECDSA P-256 CA valid for DefaultCAValidity.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	tmpl, err := template(pkix.Name{CommonName: "palisade-agent-ca", Organization: []string{"palisade.dev"}}, DefaultCAValidity)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.MaxPathLenZero = true, true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-signing the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA from its PEM certificate and key (as kept in the controller's Secret).
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the CA key pair: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !pair.Leaf.IsCA {
		return nil, errors.New("loading the CA key pair: not an ECDSA CA")
	}
	return &CA{Cert: pair.Leaf, Key: key}, nil
}

// CertPEM is the CA certificate, the bundle both sides verify the other against.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM is the CA's private key (PKCS #8), for the controller's Secret only.
func (ca *CA) KeyPEM() ([]byte, error) { return encodeKey(ca.Key) }

// IssueServer issues the controller's server certificate for hosts (DNS names or IP addresses).
func (ca *CA) IssueServer(hosts []string) (*KeyPair, error) {
	if len(hosts) == 0 {
		return nil, errors.New("issuing a server certificate: no host names")
	}
	return ca.issue(pkix.Name{CommonName: hosts[0]}, hosts, x509.ExtKeyUsageServerAuth)
}

// IssueAgent issues the client certificate of the agent on nodeName: its CommonName is the node
// name, which is the only identity the heartbeat server believes.
func (ca *CA) IssueAgent(nodeName string) (*KeyPair, error) {
	if nodeName == "" {
		return nil, errors.New("issuing an agent certificate: empty node name")
	}
	return ca.issue(pkix.Name{CommonName: nodeName, Organization: []string{"palisade.dev:agents"}}, nil, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(subject pkix.Name, hosts []string, usage x509.ExtKeyUsage) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a key for %s: %w", subject.CommonName, err)
	}
	validity := ca.LeafValidity
	if validity <= 0 {
		validity = DefaultLeafValidity
	}
	tmpl, err := template(subject, validity)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage, tmpl.ExtKeyUsage = x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{usage}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing the certificate of %s: %w", subject.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

func template(subject pkix.Name, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("drawing a serial number: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: subject, NotBefore: now.Add(-ClockSkew), NotAfter: now.Add(validity)}, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding a private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// WriteFiles writes the pair to certFile and keyFile (mode 0600), each by an atomic rename so a
// reader never sees half a file. The key is written first: a reader that sees the new
// certificate with the old key fails to load the pair and keeps its last good one.
func (p *KeyPair) WriteFiles(certFile, keyFile string) error {
	if err := WriteFileAtomic(keyFile, p.KeyPEM); err != nil {
		return err
	}
	return WriteFileAtomic(certFile, p.CertPEM)
}

// WriteFileAtomic writes data to path (mode 0600) by a rename, so that a reader of the file never
// sees half of it: certificates and keys are read while they are replaced. The data and the
// rename are synced to disk before it returns, so that a crash leaves the old file or the new
// one (the agent's fencing token relies on it).
func WriteFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("writing %s: syncing its directory: %w", path, err)
	}
	return nil
}

// NeedsRenewal says whether the PEM certificate is past its half-life at now (or unreadable):
// the issuer reissues it then, leaving the other half for the new one to reach the node.
func NeedsRenewal(certPEM []byte, now time.Time) bool {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return true
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return true
	}
	half := cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) / 2)
	return !now.Before(half)
}
