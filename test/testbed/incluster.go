package testbed

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Pods on real machines reach the API server the way in-cluster clients do: at the ClusterIP of
// the Service kubernetes (KUBERNETES_SERVICE_HOST, which the kubelet sets), through the
// machine's kube-proxy, to the Service's endpoints. Two things stand in the way in the test bed,
// and Options.InCluster removes both:
//   - envtest's serving certificate names only localhost and 127.0.0.1, so a client dialling
//     the ClusterIP refuses it. With InCluster the test bed writes the API server's
//     certificates itself (envtest keeps files it finds in its CertDir): the same serving
//     certificate, also naming KubernetesServiceIP and kubernetes.default.svc(.cluster.local).
//   - the API server advertises 127.0.0.1, which is every pod's own loopback. With InCluster it
//     runs with --endpoint-reconciler-type=none, and SetKubernetesEndpoint points the Service's
//     EndpointSlice at the address the machines reach it on (a netns relay).
//
// InCluster also turns the ServiceAccount admission plugin back on (envtest disables it), so
// that pods get their ServiceAccount's token, and has the API server reach kubelets at their
// InternalIP (pod logs).

// KubernetesServiceIP is the Service kubernetes' ClusterIP: the first address of envtest's
// --service-cluster-ip-range, 10.0.0.0/24.
const KubernetesServiceIP = "10.0.0.1"

// envtest's file names in the API server's CertDir.
const (
	servingCertFile = "apiserver.crt"
	servingKeyFile  = "apiserver.key"
	saCertFile      = "sa-signer.crt"
)

// configureInCluster writes the API server's serving certificate (and the service-account
// signer envtest would otherwise write with it) into its CertDir and leaves the Service
// kubernetes' endpoints to SetKubernetesEndpoint.
func configureInCluster(api *envtest.APIServer) error {
	ca, caKey, err := newCA("palisade-testbed-apiserver-ca")
	if err != nil {
		return fmt.Errorf("writing the API server's certificates: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("writing the API server's certificates: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("writing the API server's certificates: %w", err)
	}
	saCA, saKey, err := newCA("palisade-testbed-service-accounts")
	if err != nil {
		return fmt.Errorf("writing the API server's certificates: %w", err)
	}
	files := map[string][]byte{
		servingCertFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		servingKeyFile:  keyPEM(key),
		saCertFile:      pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: saCA.Raw}),
		saSigningKey:    keyPEM(saKey),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(api.CertDir, name), data, 0o600); err != nil {
			return fmt.Errorf("writing the API server's certificates: %w", err)
		}
	}
	api.SecureServing.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	api.Configure().
		Set("endpoint-reconciler-type", "none").
		// envtest turns the ServiceAccount admission plugin off: pods would get no token.
		Disable("disable-admission-plugins").
		// Nodes are reached at their addresses (the API server cannot resolve their names):
		// pod logs, exec.
		Set("kubelet-preferred-address-types", "InternalIP")
	return nil
}

func newCA(name string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func keyPEM(key *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(key) // cannot fail for a P-256 key
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// SetKubernetesEndpoint points the Service kubernetes at address (host:port), where pods on
// the machines reach the API server: its EndpointSlice, which kube-proxy reads. The Cluster
// must have started with Options.InCluster.
func (c *Cluster) SetKubernetesEndpoint(ctx context.Context, address string) error {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("pointing the Service kubernetes at %s: %w", address, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return fmt.Errorf("pointing the Service kubernetes at %s: %w", address, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "kubernetes", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "palisade-testbed"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	_, err = c.Kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, slice, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = c.Kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Update(ctx, slice, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("pointing the Service kubernetes at %s: %w", address, err)
	}
	return nil
}

// UserKubeconfigVia provisions a client certificate for user (in groups) and writes its
// kubeconfig to path, with the API server at server as a machine reaches it (a netns relay),
// verified for the name "localhost".
func (c *Cluster) UserKubeconfigVia(path, server, user string, groups ...string) error {
	u, err := c.env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return fmt.Errorf("provisioning user %s: %w", user, err)
	}
	cfg := rest.CopyConfig(u.Config())
	cfg.Host = "https://" + server
	cfg.TLSClientConfig.ServerName = "localhost"
	return c.writeKubeconfig(path, cfg)
}
