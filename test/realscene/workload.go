package realscene

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StatefulSetName is the witness StatefulSet's name, in namespace default: its pods are
// db-0, db-1, …
const StatefulSetName = "db"

// PodName is replica i's pod name.
func PodName(i int) string { return fmt.Sprintf("%s-%d", StatefulSetName, i) }

// DeployWitness runs the witness StatefulSet with replicas pods, each writing to the store as
// itself (downward API) with the boot ID of the machine it runs on, and waits until every
// replica's writes reach the store.
func (s *Scene) DeployWitness(t testing.TB, replicas int) {
	t.Helper()
	env := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	labels := map[string]string{"app": StatefulSetName}
	n, grace := int32(replicas), int64(5)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: StatefulSetName},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &n, ServiceName: StatefulSetName, Selector: &metav1.LabelSelector{MatchLabels: labels},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name: "db", Image: WitnessImage.Name, ImagePullPolicy: corev1.PullNever,
						Env: []corev1.EnvVar{env("POD_NAME", "metadata.name"), env("POD_UID", "metadata.uid"), env("NODE_NAME", "spec.nodeName"),
							{Name: "WITNESS_URL", Value: s.StoreURL}, {Name: "BOOT_ID_FILE", Value: "/machine/boot_id"}},
						VolumeMounts: []corev1.VolumeMount{{Name: "boot-id", MountPath: "/machine/boot_id", ReadOnly: true}},
					}},
					// The machine's boot ID as its kubelet sees it (a container's own /proc shows the host's).
					Volumes: []corev1.Volume{{Name: "boot-id", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
						Path: "/proc/sys/kernel/random/boot_id"}}}},
				},
			},
		},
	}
	if s.volumes != nil {
		s.createPVs(t, replicas)
		sts.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{claimTemplate()}
		c := &sts.Spec.Template.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: "/data"})
	}
	if err := s.Cluster.Client.Create(context.Background(), sts); err != nil {
		t.Fatal(err)
	}
	for i := range replicas {
		s.WaitWriter(t, PodName(i), "", 2*time.Minute)
	}
}

// WaitWriter waits until pod runs on a node other than notOn and the store has accepted its
// writes, and returns that node and the pod's UID.
func (s *Scene) WaitWriter(t testing.TB, pod, notOn string, timeout time.Duration) (node, uid string) {
	t.Helper()
	return s.waitWriter(t, pod, func(p *corev1.Pod) bool { return p.Spec.NodeName != notOn },
		fmt.Sprintf("a node other than %q", notOn), timeout)
}

// WaitNewWriter waits until a copy of pod other than the one with UID old runs, on any node
// (its own, rebooted and unfenced, too), and the store has accepted its writes; it returns that
// node and the copy's UID.
func (s *Scene) WaitNewWriter(t testing.TB, pod, old string, timeout time.Duration) (node, uid string) {
	t.Helper()
	return s.waitWriter(t, pod, func(p *corev1.Pod) bool { return string(p.UID) != old },
		fmt.Sprintf("a copy other than %s", old), timeout)
}

func (s *Scene) waitWriter(t testing.TB, pod string, wanted func(*corev1.Pod) bool, what string, timeout time.Duration) (node, uid string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p := &corev1.Pod{}
		if err := s.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: pod}, p); err != nil {
			return false, nil
		}
		if p.Spec.NodeName == "" || !wanted(p) || p.DeletionTimestamp != nil {
			return false, nil
		}
		if _, ok := s.Store.FirstAppend(string(p.UID)); ok {
			node, uid = p.Spec.NodeName, string(p.UID)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s to write from %s: %v", pod, what, err)
	}
	return node, uid
}
