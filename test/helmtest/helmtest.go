// Package helmtest configures Helm's Go SDK for the test bed's API server, as an operator's
// helm command would be: the admin's kubeconfig, releases stored as Secrets of the release's
// namespace, and the capabilities Helm discovers — but for the Kubernetes version, which an API
// server built from module source does not know (it reports v0.0.0-master, which fails the
// chart's kubeVersion constraint): Helm is told KubeVersion.
package helmtest

import (
	"fmt"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/test/testbed"
)

// KubeVersion is the Kubernetes release of the test bed's binaries (make testbed).
const KubeVersion = "v1.37.0"

// Configuration is Helm's action configuration for c's admin, with releases in namespace.
func Configuration(t testing.TB, c *testbed.Cluster, namespace string) *action.Configuration {
	t.Helper()
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig = ptr.To(c.KubeconfigPath())
	getter.Namespace = ptr.To(namespace)
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, namespace, "secret", t.Logf); err != nil {
		t.Fatalf("initialising Helm: %v", err)
	}
	cfg.Capabilities = Capabilities(t, c)
	return cfg
}

// Capabilities are what Helm would discover on c, with KubeVersion when the API server does
// not know its own version.
func Capabilities(t testing.TB, c *testbed.Cluster) *chartutil.Capabilities {
	t.Helper()
	dc := c.Kube.Discovery()
	sv, err := dc.ServerVersion()
	if err != nil {
		t.Fatalf("getting the server version: %v", err)
	}
	apiVersions, err := action.GetVersionSet(dc)
	if err != nil {
		t.Fatalf("discovering API versions: %v", err)
	}
	kv := chartutil.KubeVersion{Version: sv.GitVersion, Major: sv.Major, Minor: sv.Minor}
	if v, err := version.ParseSemantic(sv.GitVersion); err != nil || v.Major() == 0 {
		v = version.MustParseSemantic(KubeVersion)
		kv = chartutil.KubeVersion{Version: KubeVersion, Major: fmt.Sprint(v.Major()), Minor: fmt.Sprint(v.Minor())}
	}
	return &chartutil.Capabilities{APIVersions: apiVersions, KubeVersion: kv, HelmVersion: chartutil.DefaultCapabilities.HelmVersion}
}
