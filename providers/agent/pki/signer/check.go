package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"palisade.dev/palisade/providers/agent/pki"
)

const (
	// SignerName is the signerName of the agents' CSRs; the controller signs no other.
	SignerName = "palisade.dev/agent"
	// NodeNameExtra is the key of spec.extra under which the API server records the node of the
	// pod a ServiceAccount token is bound to.
	NodeNameExtra = "authentication.kubernetes.io/node-name"
	// AgentOrganization is the Organization of an agent certificate (optional in a request).
	AgentOrganization = "palisade.dev:agents"
	// backdate is how far NotBefore is set in the past, for nodes whose clock is a little behind.
	backdate = 5 * time.Minute
)

// allowedUsages are the key usages an agent may ask for; UsageClientAuth is required.
var allowedUsages = []certificatesv1.KeyUsage{
	certificatesv1.UsageClientAuth, certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment,
}

// ServiceAccountUser is the user name of a ServiceAccount's tokens, as a CSR's spec.username
// records it.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Check decides whether csr may have an agent certificate: it returns the parsed request and
// the node it is for, or an error whose message says why not (it becomes the CSR's Denied
// condition, so it speaks to the operator). agentUser is the agents' ServiceAccount user name.
func Check(csr *certificatesv1.CertificateSigningRequest, agentUser string) (*x509.CertificateRequest, string, error) {
	spec := csr.Spec
	if spec.SignerName != SignerName {
		return nil, "", fmt.Errorf("signerName %q is not %s", spec.SignerName, SignerName)
	}
	if spec.Username != agentUser {
		return nil, "", fmt.Errorf("requested by %q, but only the agents' ServiceAccount %q may request agent certificates", spec.Username, agentUser)
	}
	node := ""
	if v := spec.Extra[NodeNameExtra]; len(v) == 1 {
		node = v[0]
	}
	if node == "" {
		return nil, "", fmt.Errorf("the requester's token is not bound to a pod on a node (no %s in spec.extra): the agent must use its pod's projected ServiceAccount token", NodeNameExtra)
	}
	if err := checkUsages(spec.Usages); err != nil {
		return nil, "", err
	}
	req, err := parseRequest(spec.Request)
	if err != nil {
		return nil, "", err
	}
	if err := checkSubject(req, node); err != nil {
		return nil, "", err
	}
	return req, node, nil
}

func checkUsages(usages []certificatesv1.KeyUsage) error {
	if !slices.Contains(usages, certificatesv1.UsageClientAuth) {
		return fmt.Errorf("usages %q lack %q", usages, certificatesv1.UsageClientAuth)
	}
	for _, u := range usages {
		if !slices.Contains(allowedUsages, u) {
			return fmt.Errorf("usage %q is not allowed: an agent certificate has only %q", u, allowedUsages)
		}
	}
	return nil
}

func parseRequest(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("spec.request is not a PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing spec.request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("spec.request is not signed by its own key: %w", err)
	}
	return req, checkKey(req.PublicKey)
}

func checkKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
	case *rsa.PublicKey:
		if k.N.BitLen() >= 2048 {
			return nil
		}
	case ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("public key %T is not allowed: use ECDSA P-256 or P-384, RSA of 2048 bits or more, or Ed25519", pub)
}

func checkSubject(req *x509.CertificateRequest, node string) error {
	if cn := req.Subject.CommonName; cn != node {
		return fmt.Errorf("CommonName %q is not the node %q the requester's pod runs on: an agent may only request the certificate of its own node", cn, node)
	}
	if o := req.Subject.Organization; len(o) > 1 || (len(o) == 1 && o[0] != AgentOrganization) {
		return fmt.Errorf("organization %q is not allowed (only %q)", o, AgentOrganization)
	}
	if len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0 {
		return errors.New("subject alternative names are not allowed in an agent certificate")
	}
	return nil
}

// Sign issues the client certificate of the agent on node for the request's public key, valid
// for the CA's LeafValidity (pki.DefaultLeafValidity when zero) and never beyond the CA's
// own NotAfter; it returns it PEM-encoded.
func Sign(ca *pki.CA, req *x509.CertificateRequest, node string, now time.Time) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("drawing a serial number: %w", err)
	}
	validity := ca.LeafValidity
	if validity <= 0 {
		validity = pki.DefaultLeafValidity
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: node, Organization: []string{AgentOrganization}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, req.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing the agent certificate of node %s: %w", node, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
