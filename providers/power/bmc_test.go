package power_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
	"palisade.dev/palisade/test/testbed"
)

// The test reads through a real API server: client-go refuses some names ("a/b", "..") before
// sending the request, with an error that is not NotFound, which a fake client never does.
func TestNodeBMCSecretReference(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, CRDDirs: []string{}, Controllers: []string{"serviceaccount-token-controller"}})
	ctx := context.Background()
	const ns = "palisade-system"
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	creds := map[string][]byte{"username": []byte("admin"), "password": []byte("pw")}
	if err := c.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc-n1"}, Data: creds}); err != nil {
		t.Fatal(err)
	}
	method := v1alpha1.SecretReference{Namespace: ns, Name: "bmc"}
	tests := []struct {
		name       string
		annotation string                   // palisade.dev/bmc-secret, "" for none
		ref        v1alpha1.SecretReference // the method's
		want       providers.Reason         // "" for success
		wantMsg    []string                 // in the error
	}{
		{"the node's own Secret", "bmc-n1", method, "", nil},
		{"a slash", "a/b", method, providers.ReasonBadTarget, []string{v1alpha1.AnnotationBMCSecret, `"a/b"`, "DNS-1123 subdomain", ns}},
		{"dot dot", "..", method, providers.ReasonBadTarget, []string{v1alpha1.AnnotationBMCSecret, `".."`, "DNS-1123 subdomain"}},
		{"not DNS-1123", "BMC_n1", method, providers.ReasonBadTarget, []string{v1alpha1.AnnotationBMCSecret, `"BMC_n1"`, "DNS-1123 subdomain"}},
		{"a well-formed name of no Secret", "bmc-n2", method, providers.ReasonBadTarget, []string{ns + "/bmc-n2", "does not exist"}},
		{"the method's namespace malformed", "", v1alpha1.SecretReference{Namespace: "a/b", Name: "bmc"}, providers.ReasonBadTarget, []string{`"a/b"/"bmc"`, "namespace: "}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i),
				Annotations: map[string]string{v1alpha1.AnnotationBMCAddress: "10.0.0.1"}}}
			if tt.annotation != "" {
				node.Annotations[v1alpha1.AnnotationBMCSecret] = tt.annotation
			}
			if err := c.Client.Create(ctx, node); err != nil {
				t.Fatal(err)
			}
			b, err := power.NodeBMC(ctx, c.Client, "ipmi", node.Name, tt.ref)
			if tt.want == "" {
				if err != nil || b.Username != "admin" || b.Password != "pw" {
					t.Fatalf("NodeBMC = %q, %v; want the credentials of Secret %s/bmc-n1", b.Username, err, ns)
				}
				return
			}
			if providers.ReasonOf(err) != tt.want || providers.IsRetryable(err) {
				t.Fatalf("NodeBMC error = %v (reason %s), want %s, not retryable", err, providers.ReasonOf(err), tt.want)
			}
			for _, want := range tt.wantMsg {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("NodeBMC error %q does not say %q", err, want)
				}
			}
		})
	} // A node that does not exist (a NodeFence made by hand for a name no node has) has no BMC to
	// find: BadTarget at once, not an API error retried for the method's whole time.
	if _, err := power.NodeBMC(ctx, c.Client, "ipmi", "no-such-node", method); providers.ReasonOf(err) != providers.ReasonBadTarget || providers.IsRetryable(err) ||
		!strings.Contains(err.Error(), "node no-such-node does not exist") {
		t.Errorf("NodeBMC of a node that does not exist: %v (reason %s), want %s saying so, not retryable", err, providers.ReasonOf(err), providers.ReasonBadTarget)
	}
}
