package signer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
)

// A CSR's spec.request is outside input (any agent's pod can create one): an accepted request
// is a PEM CERTIFICATE REQUEST signed by its own key, of an allowed kind; anything else is
// refused with a message and no request.
func FuzzParseRequest(f *testing.F) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-1"}}, key)
	if err != nil {
		f.Fatal(err)
	}
	good := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	f.Add(good)
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	tampered := append([]byte{}, der...)
	tampered[len(tampered)-1] ^= 0xff
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered}))
	f.Add([]byte("not pem"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := parseRequest(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("a refusal without a message")
			}
			return
		}
		if req == nil {
			t.Fatal("accepted without a request")
		}
		if err := req.CheckSignature(); err != nil {
			t.Fatalf("accepted a request not signed by its own key: %v", err)
		}
		if err := checkKey(req.PublicKey); err != nil {
			t.Fatalf("accepted a key that is not allowed: %v", err)
		}
		if block, _ := pem.Decode(data); block == nil || block.Type != "CERTIFICATE REQUEST" {
			t.Fatal("accepted something that is not a PEM CERTIFICATE REQUEST")
		}
	})
}
