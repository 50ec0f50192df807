package testbed_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"palisade.dev/palisade/test/testbed"
)

// TestRestartAPIServer: an object written before an outage of kube-apiserver is read back
// after it (etcd kept) through the same clients (same address and certificates), and the
// API is unreachable in between.
func TestRestartAPIServer(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{})
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "before-outage"}}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.StopAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err == nil {
		t.Error("the API answered while stopped")
	}
	began := time.Now()
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver ready again in %s", time.Since(began).Round(time.Millisecond))
	if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("reading the namespace written before the outage: %v", err)
	}
}
