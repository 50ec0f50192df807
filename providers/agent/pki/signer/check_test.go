package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"palisade.dev/palisade/providers/agent/pki"
)

const testAgentUser = "system:serviceaccount:palisade-system:palisade-agent"

// requestPEM makes a PEM CSR for subject (and DNS names) signed by key.
func requestPEM(t *testing.T, key crypto.Signer, subject pkix.Name, dnsNames ...string) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject, DNSNames: dnsNames}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func ecKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCheck(t *testing.T) {
	key := ecKey(t)
	good := func() *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
			SignerName: SignerName,
			Username:   testAgentUser,
			Extra:      map[string]certificatesv1.ExtraValue{NodeNameExtra: {"node-a"}},
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			Request:    requestPEM(t, key, pkix.Name{CommonName: "node-a", Organization: []string{AgentOrganization}}),
		}}
	}
	smallRSA, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		mutate  func(*certificatesv1.CertificateSigningRequest)
		wantErr string // "" means allowed
	}{
		{"good", func(*certificatesv1.CertificateSigningRequest) {}, ""},
		{"client auth only, no organization", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}
			c.Spec.Request = requestPEM(t, key, pkix.Name{CommonName: "node-a"})
		}, ""},
		{"other signer", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.SignerName = "kubernetes.io/kube-apiserver-client"
		}, "is not palisade.dev/agent"},
		{"other requester", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Username = "system:serviceaccount:default:default"
		}, "only the agents' ServiceAccount"},
		{"token not bound to a pod", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Extra = nil }, "not bound to a pod on a node"},
		{"another node's name", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = requestPEM(t, key, pkix.Name{CommonName: "node-b"})
		}, `CommonName "node-b" is not the node "node-a"`},
		{"server auth", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageServerAuth)
		}, `usage "server auth" is not allowed`},
		{"no client auth", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}
		}, `lack "client auth"`},
		{"other organization", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = requestPEM(t, key, pkix.Name{CommonName: "node-a", Organization: []string{"system:masters"}})
		}, "organization"},
		{"subject alternative names", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = requestPEM(t, key, pkix.Name{CommonName: "node-a"}, "controller.example")
		}, "subject alternative names"},
		{"weak key", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = requestPEM(t, smallRSA, pkix.Name{CommonName: "node-a"})
		}, "is not allowed: use ECDSA"},
		{"not PEM", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = []byte("hello") }, "not a PEM CERTIFICATE REQUEST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			csr := good()
			tt.mutate(csr)
			req, node, err := Check(csr, testAgentUser)
			if tt.wantErr == "" {
				if err != nil || node != "node-a" || req == nil {
					t.Fatalf("Check = %v, %q, %v; want the request for node-a", req, node, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Check error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestSign(t *testing.T) {
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	key := ecKey(t)
	req, err := x509.ParseCertificateRequest(mustDER(t, requestPEM(t, key, pkix.Name{CommonName: "node-a"})))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	certPEM, err := Sign(ca, req, "node-a", now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(mustDER(t, certPEM))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("signed certificate does not verify as a client certificate of the CA: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("signed agent certificate verifies as a server certificate")
	}
	if cert.Subject.CommonName != "node-a" || !key.PublicKey.Equal(cert.PublicKey) {
		t.Errorf("certificate for %q with key %v, want node-a with the request's key", cert.Subject.CommonName, cert.PublicKey)
	}
	if got := cert.NotAfter.Sub(now); got < pki.DefaultLeafValidity-time.Second || got > pki.DefaultLeafValidity+time.Second {
		t.Errorf("valid for %s after now, want %s", got, pki.DefaultLeafValidity)
	}
}

func mustDER(t *testing.T, p []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(p)
	if block == nil {
		t.Fatalf("no PEM in %q", p)
	}
	return block.Bytes
}
