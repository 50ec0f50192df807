package testbed_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/simnode"
)

// TestClusterRunsADeployment starts the real control plane, lets the real scheduler place a
// Deployment's pod on one of two simulated nodes, and checks that Stop leaves no process.
func TestClusterRunsADeployment(t *testing.T) {
	began := time.Now()
	c := testbed.StartT(t, testbed.Options{})
	t.Logf("Start took %s", time.Since(began).Round(time.Millisecond))
	ctx := t.Context()

	nodes := map[string]bool{}
	var sims []*simnode.Node
	for _, name := range []string{"node-a", "node-b"} {
		n, err := simnode.Start(ctx, c.Kube, simnode.Options{Name: name, LeaseRenewInterval: 2 * time.Second, Logf: t.Logf})
		if err != nil {
			t.Fatalf("starting %s: %v", name, err)
		}
		t.Cleanup(n.Stop)
		sims = append(sims, n)
		nodes[name] = true
	}

	created := time.Now()
	if err := c.Client.Create(ctx, newDeployment("web")); err != nil {
		t.Fatalf("creating deployment: %v", err)
	}
	pod := waitForRunningPod(t, c, "app=web")
	if !nodes[pod.Spec.NodeName] {
		t.Fatalf("pod %s bound to %q, want one of the simulated nodes", pod.Name, pod.Spec.NodeName)
	}
	t.Logf("pod %s Running on %s %s after the Deployment was created", pod.Name, pod.Spec.NodeName, time.Since(created).Round(time.Millisecond))

	// The admin kubeconfig works for an outside client.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath())
	if err != nil {
		t.Fatalf("loading %s: %v", c.KubeconfigPath(), err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{}); err != nil {
		t.Errorf("getting node through the admin kubeconfig: %v", err)
	}

	// Palisade's CRDs are installed and its kinds are in the scheme.
	var fences fencingv1alpha1.NodeFenceList
	if err := c.Client.List(ctx, &fences); err != nil {
		t.Errorf("listing NodeFences: %v", err)
	}

	for _, n := range sims {
		n.Stop()
	}
	assertStopLeavesNothing(t, c)
}

func newDeployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
}

// waitForRunningPod waits for a Running and Ready pod matching selector.
func waitForRunningPod(t *testing.T, c *testbed.Cluster, selector string) corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var last string
	for {
		pods, err := c.Kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
					return p
				}
				last = p.Name + " phase " + string(p.Status.Phase) + " node " + p.Spec.NodeName
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no Running pod with %s (last seen: %s)", selector, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// assertStopLeavesNothing stops c and checks that its five processes and its Dir are gone.
func assertStopLeavesNothing(t *testing.T, c *testbed.Cluster) {
	t.Helper()
	pids, err := testbed.ProcessesUsing(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 5 {
		t.Errorf("found %d processes of the test bed (%v), want 5: etcd, kube-apiserver, KCM, scheduler, csi-attacher", len(pids), pids)
	}
	began := time.Now()
	if err := c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	t.Logf("Stop took %s", time.Since(began).Round(time.Millisecond))
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after Stop (kill -0: %v)", pid, err)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("test bed dir %s still exists after Stop (stat: %v)", c.Dir, err)
	}
}

func TestStartWithoutBinariesFails(t *testing.T) {
	for name, dir := range map[string]string{"unset": "", "empty dir": t.TempDir()} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(testbed.EnvBinDir, dir)
			c, err := testbed.Start(t.Context(), testbed.Options{})
			if err == nil {
				_ = c.Stop()
				t.Fatal("Start succeeded without binaries")
			}
			if !strings.Contains(err.Error(), "run `make testbed`") {
				t.Errorf("error %q does not tell to run `make testbed`", err)
			}
		})
	}
}
