package signer

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
)

// FuzzCheck checks the reader of an agent's certificate request, which any holder of the
// agents' ServiceAccount token can write: an accepted request is for exactly the requester's
// node, in the agents' organization, with no alternative names and an allowed key; a refused one
// gives no request and a message for the CSR's Denied condition; the verdict is the same twice.
func FuzzCheck(f *testing.F) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	weak, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	for _, seed := range []struct {
		key  any
		tmpl x509.CertificateRequest
	}{
		{ec, x509.CertificateRequest{Subject: pkix.Name{CommonName: "n1", Organization: []string{AgentOrganization}}}},
		{ed, x509.CertificateRequest{Subject: pkix.Name{CommonName: "n1"}}},
		{ec, x509.CertificateRequest{Subject: pkix.Name{CommonName: "n2"}}},
		{ec, x509.CertificateRequest{Subject: pkix.Name{CommonName: "n1", Organization: []string{"system:masters"}}}},
		{ec, x509.CertificateRequest{Subject: pkix.Name{CommonName: "n1"}, DNSNames: []string{"api"}}},
		{weak, x509.CertificateRequest{Subject: pkix.Name{CommonName: "n1"}}},
	} {
		der, err := x509.CreateCertificateRequest(rand.Reader, &seed.tmpl, seed.key)
		if err != nil {
			f.Fatalf("creating a seed request: %v", err)
		}
		f.Add(der, "n1", false)
	}
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), "n1", true)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), "n1", true)
	f.Add([]byte{}, "", true)
	f.Fuzz(func(t *testing.T, data []byte, node string, raw bool) {
		if !raw {
			data = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: data})
		}
		const user = "system:serviceaccount:palisade:agent"
		csr := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
			SignerName: SignerName, Username: user, Request: data,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			Extra:  map[string]certificatesv1.ExtraValue{NodeNameExtra: {node}},
		}}
		req, got, err := Check(csr, user)
		_, _, again := Check(csr, user)
		if (err == nil) != (again == nil) {
			t.Fatalf("Check is not deterministic: %v then %v", err, again)
		}
		if err != nil {
			if err.Error() == "" || req != nil || got != "" {
				t.Fatalf("Check refused with %v, %q, %q", req, got, err)
			}
			return
		}
		if got != node || node == "" || req.Subject.CommonName != node {
			t.Fatalf("Check accepted a request for %q from node %q as %q", req.Subject.CommonName, node, got)
		}
		if o := req.Subject.Organization; len(o) > 1 || (len(o) == 1 && o[0] != AgentOrganization) {
			t.Fatalf("Check accepted organization %q", o)
		}
		if len(req.DNSNames)+len(req.IPAddresses)+len(req.EmailAddresses)+len(req.URIs) > 0 {
			t.Fatal("Check accepted alternative names")
		}
		if checkKey(req.PublicKey) != nil || req.CheckSignature() != nil {
			t.Fatal("Check accepted a request with a refused key or a bad signature")
		}
	})
}
