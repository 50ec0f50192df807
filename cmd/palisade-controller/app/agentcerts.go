package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/providers/agent/pki/signer"
)

// AgentCertOptions configure the agents' certificates through the Kubernetes CSR API (package
// providers/agent/pki/signer): the CA kept in a Secret, its bundle published for the agents, the
// signer of the agents' CSRs, and the heartbeat server's own certificate.
type AgentCertOptions struct {
	// CASecret is the Secret in Namespace holding the CA, created when missing; "" disables
	// all of this (certificates are then made by hand).
	CASecret string
	// CAConfigMap is the ConfigMap in Namespace where the CA bundle is published for agents.
	CAConfigMap string
	// Namespace is the controller's own namespace.
	Namespace string
	// AgentServiceAccount is the agents' ServiceAccount, "namespace/name": only its pod-bound
	// tokens get certificates.
	AgentServiceAccount string
	// ServerHosts are the names (DNS names or IP addresses) of the heartbeat server's
	// certificate, written to Options.Agents' CertFile, KeyFile and CAFile.
	ServerHosts []string
}

// agentServiceAccount is --agent-service-account's ServiceAccount, zero when it is not set; an
// error when it is not namespace/name.
func agentServiceAccount(o Options) (types.NamespacedName, error) {
	if o.AgentCerts.AgentServiceAccount == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, ok := strings.Cut(o.AgentCerts.AgentServiceAccount, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--agent-service-account %q must be namespace/name of the agents' ServiceAccount", o.AgentCerts.AgentServiceAccount)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// setupAgentCerts runs before the heartbeat server is built, which loads the files it writes:
// it gets (or makes) the CA, publishes its bundle, writes the server certificate and adds its
// renewal (every replica) and the CSR signer (the leader).
func setupAgentCerts(mgr ctrl.Manager, o Options) error {
	ac := o.AgentCerts
	if ac.CASecret == "" {
		return nil
	}
	saNS, saName, err := ac.validate(o)
	if err != nil {
		return err
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()}) // the cache is not started yet
	if err != nil {
		return fmt.Errorf("building a client for the agents' CA: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca, err := signer.EnsureCA(ctx, c, types.NamespacedName{Namespace: ac.Namespace, Name: ac.CASecret})
	if err != nil {
		return err
	}
	if err := signer.PublishBundle(ctx, c, types.NamespacedName{Namespace: ac.Namespace, Name: ac.CAConfigMap}, ca); err != nil {
		return err
	}
	if o.Agents.Addr != "" {
		sc := &signer.ServerCert{CA: ca, Hosts: ac.ServerHosts, CertFile: o.Agents.CertFile, KeyFile: o.Agents.KeyFile, CAFile: o.Agents.CAFile,
			Log: mgr.GetLogger().WithName("agent-server-cert")}
		if err := sc.Ensure(); err != nil {
			return fmt.Errorf("issuing the heartbeat server certificate: %w", err)
		}
		if err := mgr.Add(sc); err != nil {
			return fmt.Errorf("adding the heartbeat server certificate renewal: %w", err)
		}
	}
	signer := &signer.Signer{Client: mgr.GetClient(), CA: ca, AgentUser: signer.ServiceAccountUser(saNS, saName)}
	if err := signer.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the agent CSR signer: %w", err)
	}
	return nil
}

// validate checks the options and returns the agents' ServiceAccount.
func (ac AgentCertOptions) validate(o Options) (string, string, error) {
	var errs []error
	if ac.Namespace == "" {
		errs = append(errs, errors.New("the agents' CA needs the controller's namespace: set --pod-namespace or $POD_NAMESPACE (downward API)"))
	}
	if ac.CAConfigMap == "" {
		errs = append(errs, errors.New("--agent-ca-configmap must name the ConfigMap for the agents' CA bundle"))
	}
	sa, err := agentServiceAccount(o)
	switch {
	case err != nil:
		errs = append(errs, err)
	case sa.Name == "": // the signer needs it
		errs = append(errs, fmt.Errorf("--agent-service-account %q must be namespace/name of the agents' ServiceAccount", ac.AgentServiceAccount))
	}
	if o.Agents.Addr != "" {
		if o.Agents.CertFile == "" || o.Agents.KeyFile == "" || o.Agents.CAFile == "" {
			errs = append(errs, errors.New("--agent-ca-secret with --agent-listen-address needs --agent-tls-cert, --agent-tls-key and --agent-ca: the files the controller writes its server certificate to"))
		}
		if len(ac.ServerHosts) == 0 {
			errs = append(errs, errors.New("--agent-tls-hosts must list the names agents reach the heartbeat server by (the heartbeat Service's DNS names)"))
		}
	}
	return sa.Namespace, sa.Name, errors.Join(errs...)
}
