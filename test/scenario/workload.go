package scenario

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The database StatefulSet of the scene.
const (
	Namespace  = "default"
	AppName    = "db"
	PodName    = "db-0"
	ClaimName  = "data-db-0"
	VolumeName = "pv-db-0"
	CSIDriver  = "rwo.csi.palisade.dev"
)

// Workload is the deployed database pod and its volume attachment.
type Workload struct {
	Pod        *corev1.Pod
	Attachment *storagev1.VolumeAttachment
}

// DeployDatabase creates a one-replica StatefulSet with an RWO CSI volume, placed on node
// first (the other nodes are cordoned until it runs there), and waits until the pod is Running
// and kube-controller-manager's attach-detach controller has attached its volume to node.
func (e *Env) DeployDatabase(ctx context.Context, first *Node) (*Workload, error) {
	c := e.Cluster.Client
	if err := c.Create(ctx, persistentVolume(e.opts.VolumeHandle)); err != nil {
		return nil, fmt.Errorf("creating persistent volume: %w", err)
	}
	others := e.otherNodes(first)
	if err := e.setUnschedulable(ctx, others, true); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, statefulSet()); err != nil {
		return nil, fmt.Errorf("creating statefulset: %w", err)
	}
	pod, err := e.WaitPodRunning(ctx, first.Name(), "", 2*time.Minute)
	if err != nil {
		return nil, err
	}
	if err := e.setUnschedulable(ctx, others, false); err != nil {
		return nil, err
	}
	va, err := e.waitAttachment(ctx, first.Name(), time.Minute)
	if err != nil {
		return nil, err
	}
	return &Workload{Pod: pod, Attachment: va}, nil
}

// describeNodes says, for an error, what the scheduler sees of each node.
func (e *Env) describeNodes(ctx context.Context) string {
	var nodes corev1.NodeList
	if err := e.Cluster.Client.List(ctx, &nodes); err != nil {
		return "nodes: " + err.Error()
	}
	s := "nodes:"
	for _, n := range nodes.Items {
		s += fmt.Sprintf(" %s(unschedulable=%t taints=%v ready=%t)", n.Name, n.Spec.Unschedulable, n.Spec.Taints, NodeReady(&n))
	}
	return s
}

func (e *Env) otherNodes(n *Node) []*Node {
	var out []*Node
	for _, x := range e.Nodes {
		if x != n {
			out = append(out, x)
		}
	}
	return out
}

func (e *Env) setUnschedulable(ctx context.Context, nodes []*Node, on bool) error {
	for _, n := range nodes {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name()}}
		if err := e.Cluster.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			return fmt.Errorf("cordoning node %s: %w", n.Name(), err)
		}
	}
	return nil
}

// WaitPodRunning waits for the database pod to run on node ("" for any node other than
// notOn) and returns it.
func (e *Env) WaitPodRunning(ctx context.Context, node, notOn string, timeout time.Duration) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := e.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: PodName}, &pod); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		on := pod.Spec.NodeName
		return pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil &&
			(node == "" || on == node) && (notOn == "" || on != notOn), nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for pod %s to run (on %q, not on %q): %w; last seen on %q phase %s conditions %+v; %s",
			PodName, node, notOn, err, pod.Spec.NodeName, pod.Status.Phase, pod.Status.Conditions, e.describeNodes(ctx))
	}
	return &pod, nil
}

// Attachments lists the VolumeAttachments on node.
func (e *Env) Attachments(ctx context.Context, node string) ([]storagev1.VolumeAttachment, error) {
	return attachments(ctx, e.Cluster.Client, node)
}

func attachments(ctx context.Context, c client.Client, node string) ([]storagev1.VolumeAttachment, error) {
	var list storagev1.VolumeAttachmentList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	var out []storagev1.VolumeAttachment
	for _, va := range list.Items {
		if va.Spec.NodeName == node {
			out = append(out, va)
		}
	}
	return out, nil
}

func (e *Env) waitAttachment(ctx context.Context, node string, timeout time.Duration) (*storagev1.VolumeAttachment, error) {
	var found *storagev1.VolumeAttachment
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		vas, err := e.Attachments(ctx, node)
		if err != nil || len(vas) == 0 {
			return false, err
		}
		found = &vas[0]
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the attach-detach controller to attach %s to %s: %w", VolumeName, node, err)
	}
	return found, nil
}

func persistentVolume(handle string) *corev1.PersistentVolume {
	if handle == "" {
		handle = "vol-db-0"
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: VolumeName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: Namespace, Name: ClaimName},
			StorageClassName:              "",
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: CSIDriver, VolumeHandle: handle,
			}},
		},
	}
}

func statefulSet() *appsv1.StatefulSet {
	labels := map[string]string{"app": AppName}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: AppName},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1), ServiceName: AppName,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "db", Image: "registry.k8s.io/pause:3.10",
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr.To(""),
					VolumeName:       VolumeName,
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
}
