package palisade_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"palisade.dev/palisade/test/testbed"
)

// TestPodSecurityOnAPIServer asks the real API server's PodSecurity admission, in a namespace
// that enforces "restricted", to admit the chart's pods (dry run): the controller's, the helm
// test Pod and the uninstall Job's must pass, the agent's must be refused. The same verdicts
// from restrictedViolations show that the Go check agrees with Kubernetes' own.
func TestPodSecurityOnAPIServer(t *testing.T) {
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, CRDDirs: []string{}, Controllers: []string{"serviceaccount-token-controller"}})
	ctx := context.Background()
	const ns = "restricted"
	_, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
	}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"palisade", "palisade-agent"} {
		if _, err := c.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := render(t, nil)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	ctl, agent, test, cleanup := deployment(t, ms).Spec.Template, daemonSet(t, ms).Spec.Template, testPod(t, ms), uninstallJob(t, ms).Spec.Template
	pods := []struct {
		name     string
		meta     metav1.ObjectMeta
		spec     corev1.PodSpec
		admitted bool
	}{
		{"controller", ctl.ObjectMeta, ctl.Spec, true},
		{"helm-test", test.ObjectMeta, test.Spec, true},
		{"uninstall", cleanup.ObjectMeta, cleanup.Spec, true},
		{"agent", agent.ObjectMeta, agent.Spec, false},
	}
	for _, p := range pods {
		t.Run(p.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: *p.meta.DeepCopy(), Spec: *p.spec.DeepCopy()}
			pod.Name, pod.Namespace = p.name, ns
			_, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case p.admitted && err != nil:
				t.Errorf("the API server refuses it under restricted: %v", err)
			case !p.admitted && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted:latest"`)):
				t.Errorf("the API server's answer %v, want a refusal by PodSecurity restricted", err)
			}
			// Whatever the expectation, the Go check must agree with the API server.
			if v := restrictedViolations(p.meta, p.spec); (len(v) == 0) != (err == nil) {
				t.Errorf("restrictedViolations says %q; the API server answered %v", v, err)
			}
		})
	}
}
