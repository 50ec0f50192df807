package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// kubeFlags are kubectl's flags for picking a cluster.
type kubeFlags struct {
	kubeconfig, context string
}

// register adds --kubeconfig and --context to fs, keeping values already parsed (the flags may
// stand before the command and after it).
func (f *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", f.kubeconfig, "the kubeconfig file")
	fs.StringVar(&f.context, "context", f.context, "the kubeconfig context")
}

// clientConfig loads the kubeconfig as kubectl does: --kubeconfig, else $KUBECONFIG (a list of
// files, merged), else ~/.kube/config; --context overrides the current context; in a pod with
// no kubeconfig, the pod's ServiceAccount.
func (f kubeFlags) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context})
}

// requestTimeout bounds every API request, so that an unreachable API server ends the command.
const requestTimeout = 30 * time.Second

// connect returns an uncached client for the cluster the flags name.
func connect(f kubeFlags) (client.Client, error) {
	cfg, err := f.clientConfig().ClientConfig()
	if err != nil {
		return nil, kubeconfigError(f, err)
	}
	cfg.Timeout = requestTimeout
	cfg.UserAgent = "kubectl-palisade"
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server at %s: %w", cfg.Host, err)
	}
	return c, nil
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	return scheme, nil
}

// errNoKubeconfig says how to point the tool at a cluster.
var errNoKubeconfig = errors.New("no cluster to talk to: no kubeconfig found ($KUBECONFIG is unset or " +
	"names no existing file, and there is no ~/.kube/config) and this is not a pod in a cluster. " +
	"Point at a cluster with --kubeconfig FILE or KUBECONFIG=FILE (the file kubectl uses), " +
	"and pick one of its contexts with --context NAME")

func kubeconfigError(f kubeFlags, err error) error {
	switch {
	case clientcmd.IsEmptyConfig(err):
		return errNoKubeconfig
	case clientcmd.IsContextNotFound(err) || (f.context != "" && strings.Contains(err.Error(), fmt.Sprintf("context %q does not exist", f.context))):
		return fmt.Errorf("context %q is not in the kubeconfig (`kubectl config get-contexts` lists the contexts): %w", f.context, err)
	case f.kubeconfig != "":
		return fmt.Errorf("loading kubeconfig %s: %w", f.kubeconfig, err)
	}
	return fmt.Errorf("loading kubeconfig: %w", err)
}

// Resources the tool reads and writes, for error messages.
var (
	nodesResource     = schema.GroupResource{Resource: "nodes"}
	leasesResource    = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	podsResource      = schema.GroupResource{Resource: "pods"}
	claimsResource    = schema.GroupResource{Resource: "persistentvolumeclaims"}
	attachmentsRes    = schema.GroupResource{Group: "storage.k8s.io", Resource: "volumeattachments"}
	policiesResource  = schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "fencingpolicies"}
	nodeFenceResource = schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "nodefences"}
)

// deniedError is the API server's refusal of a write by an admission policy or webhook: its
// message (which, for Palisade's chart, names who may) is what the user needs to read.
type deniedError struct {
	what string // "fence request", "unfence request"
	msg  string
}

func (e *deniedError) Error() string {
	return fmt.Sprintf("the cluster's admission policy refused the %s: %s", e.what, e.msg)
}

// apiError turns an API error into one that says what to do. verb and gr name the request
// ("get", nodesResource), name its object ("" for a list), namespace its namespace ("" for
// cluster-scoped objects).
func apiError(err error, verb string, gr schema.GroupResource, namespace, name string) error {
	scope, canI := "cluster-wide", ""
	if namespace != "" {
		scope, canI = "in namespace "+namespace, " -n "+namespace
	}
	what := gr.String()
	if name != "" {
		what += " " + name
	}
	switch {
	case meta.IsNoMatchError(err) || (gr.Group == v1alpha1.GroupVersion.Group && apierrors.IsNotFound(err) && name == ""):
		return fmt.Errorf("the cluster does not serve %s (API group %s): Palisade's CRDs are not installed there; "+
			"install the chart (helm install palisade charts/palisade), or check --context: %w", gr.Resource, gr.Group, err)
	case apierrors.IsForbidden(err) && admissionDenial(err):
		return err // the caller says which request was refused (deniedError)
	case apierrors.IsForbidden(err):
		group := gr.Group
		if group == "" {
			group = `"" (core)`
		}
		return fmt.Errorf("permission missing: you may not %s %s %s. Ask your cluster admin for RBAC that grants verb %q on resource %q of API group %s %s "+
			"(check with: kubectl auth can-i %s %s%s). The API server said: %s",
			verb, what, scope, verb, gr.Resource, group, scope, verb, gr.String(), canI, statusMessage(err))
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server did not accept your credentials (401 Unauthorized) when %s %s: log in again or check the user of your kubeconfig context: %w",
			gerund(verb), what, err)
	case unreachable(err):
		return fmt.Errorf("cannot reach the API server (%s %s): %w. Check the kubeconfig context (--context) and your connection to the cluster",
			gerund(verb), what, err)
	}
	return fmt.Errorf("%s %s: %w", gerund(verb), what, err)
}

// admissionDenial says whether a Forbidden error came from admission (a ValidatingAdmissionPolicy
// or a webhook) rather than from RBAC.
func admissionDenial(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "ValidatingAdmissionPolicy") || strings.Contains(msg, "admission webhook") ||
		strings.Contains(msg, "denied request") || strings.Contains(msg, "denied the request")
}

// unreachable says whether err is a failure to reach the API server at all.
func unreachable(err error) bool {
	var uerr *url.Error
	var nerr net.Error
	return errors.As(err, &uerr) || errors.As(err, &nerr)
}

func gerund(verb string) string {
	switch verb {
	case "get":
		return "reading"
	case "list":
		return "listing"
	case "patch":
		return "patching"
	}
	return verb + "ing"
}

// statusMessage is the API server's own message of err, or err's text.
func statusMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}
