package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"palisade.dev/palisade/providers/agent/pki"
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
	fs.BoolVar(&c.request, "request-certificate", false, "get the client certificate through a CertificateSigningRequest (signer "+pki.SignerName+") with the pod's ServiceAccount token, keep it in --cert-dir and renew it past half-life; replaces --cert, --key and --ca")
	fs.StringVar(&c.dir, "cert-dir", "/var/lib/palisade-agent/pki", "directory of the requested certificate ("+pki.CertFileName+", "+pki.KeyFileName+", "+pki.CAFileName+")")
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

// requester is the configuration of pki.Requester.
func (c *certOptions) requester() pki.RequesterConfig {
	return pki.RequesterConfig{Dir: c.dir, APIServer: c.apiServer, TokenFile: c.tokenFile, APICAFile: c.apiCAFile,
		CAConfigMap: c.caConfigMap, CheckInterval: c.checkInterval}
}
