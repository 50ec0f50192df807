package testbed

import (
	"context"
	"fmt"
	"sync"

	csiaddonsv1alpha1 "github.com/csi-addons/kubernetes-csi-addons/api/csiaddons/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// csiAddonsServiceAccount is the sidecar's ServiceAccount, bound to cluster-admin.
	csiAddonsServiceAccount = "csi-addons"
	// csiAddonsBinding binds it to cluster-admin: a test bed, not a deployment to copy
	// (the sidecar needs pods and replicasets get, csiaddonsnodes create/update/watch,
	// leases, secrets get and events create).
	csiAddonsBinding = "palisade-testbed:csi-addons"
	// csiAddonsOwner is the DaemonSet that owns the sidecar's Pod: the sidecar refuses to
	// start for a Pod without an owner, and names its CSIAddonsNode after it. No
	// daemonset controller runs by default; its node selector matches no node anyway.
	csiAddonsOwner = "csi-addons-sidecar"
	// notScheduled is the sidecar Pod's scheduler: none, so that kube-scheduler leaves it
	// alone (a Pod bound to a node that does not exist would be deleted by PodGC).
	notScheduled = "palisade-testbed-none"
	// saTokenLifetime is the lifetime of the sidecar's token: longer than any test.
	saTokenLifetime = 24 * 60 * 60
)

var csiAddonsLabels = map[string]string{"app": "csi-addons-sidecar"}

// createCSIAddonsObjects creates CSIAddonsNamespace, the sidecar's ServiceAccount and its
// binding, the DaemonSet and the Pod that stand for the sidecar (status.podIP 127.0.0.1) and
// NetworkFenceSecretName, and returns the Pod's UID.
func (c *Cluster) createCSIAddonsObjects(ctx context.Context) (string, error) {
	ds := csiAddonsDaemonSet()
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CSIAddonsNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: csiAddonsServiceAccount, Namespace: CSIAddonsNamespace}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: csiAddonsBinding},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: csiAddonsServiceAccount, Namespace: CSIAddonsNamespace}},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: NetworkFenceSecretName, Namespace: CSIAddonsNamespace},
			StringData: map[string]string{"userID": "palisade-testbed", "userKey": "not-a-real-key"},
		},
		ds,
	}
	for _, o := range objs {
		if err := c.Client.Create(ctx, o); err != nil {
			return "", fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	pod := csiAddonsPod(ds)
	if err := c.Client.Create(ctx, pod); err != nil {
		return "", fmt.Errorf("creating Pod %s: %w", pod.Name, err)
	}
	pod.Status = corev1.PodStatus{
		Phase:  corev1.PodRunning,
		PodIP:  "127.0.0.1",
		PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
	}
	if err := c.Client.Status().Update(ctx, pod); err != nil {
		return "", fmt.Errorf("setting the IP of Pod %s: %w", pod.Name, err)
	}
	return string(pod.UID), nil
}

// createNetworkFenceClass creates NetworkFenceClassName.
func (c *Cluster) createNetworkFenceClass(ctx context.Context) error {
	nfc := &csiaddonsv1alpha1.NetworkFenceClass{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkFenceClassName},
		Spec: csiaddonsv1alpha1.NetworkFenceClassSpec{
			Provisioner: CSIAddonsDriverName,
			Parameters: map[string]string{
				"clusterID": "palisade-testbed",
				"csiaddons.openshift.io/networkfence-secret-name":      NetworkFenceSecretName,
				"csiaddons.openshift.io/networkfence-secret-namespace": CSIAddonsNamespace,
			},
		},
	}
	if err := c.Client.Create(ctx, nfc); err != nil {
		return fmt.Errorf("creating NetworkFenceClass %s: %w", nfc.Name, err)
	}
	return nil
}

// warmCSIAddonsAPI reads, concurrently, the csi-addons resources the start and the tests
// use first, and closes the returned channel once all have answered. kube-apiserver answers
// the first request for each resource of a newly installed CRD only after about a second
// (seen here: 1.0 s for the first list of networkfenceclasses, then 2 ms); made in turn,
// those first requests would add seconds to the start.
func (c *Cluster) warmCSIAddonsAPI(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range []client.ObjectList{
		&csiaddonsv1alpha1.NetworkFenceClassList{},
		&csiaddonsv1alpha1.CSIAddonsNodeList{},
		&csiaddonsv1alpha1.NetworkFenceList{},
	} {
		wg.Go(func() { _ = c.Client.List(ctx, l, client.Limit(1)) })
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

func csiAddonsDaemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: csiAddonsOwner, Namespace: CSIAddonsNamespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: csiAddonsLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: csiAddonsLabels},
				Spec:       csiAddonsPodSpec(),
			},
		},
	}
}

func csiAddonsPod(owner *appsv1.DaemonSet) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      CSIAddonsSidecarPod,
			Namespace: CSIAddonsNamespace,
			Labels:    csiAddonsLabels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "DaemonSet", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true),
			}},
		},
		Spec: csiAddonsPodSpec(),
	}
}

func csiAddonsPodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		ServiceAccountName:           csiAddonsServiceAccount,
		AutomountServiceAccountToken: ptr.To(false),
		SchedulerName:                notScheduled,
		NodeSelector:                 map[string]string{"palisade.dev/no-such-node": "true"},
		Containers: []corev1.Container{{
			Name:            "csi-addons",
			Image:           "csi-addons-sidecar:testbed",
			ImagePullPolicy: corev1.PullNever,
		}},
	}
}

// serviceAccountToken requests a token of the sidecar's ServiceAccount (TokenRequest API).
func (c *Cluster) serviceAccountToken(ctx context.Context) (string, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](saTokenLifetime)}}
	tr, err := c.Kube.CoreV1().ServiceAccounts(CSIAddonsNamespace).CreateToken(ctx, csiAddonsServiceAccount, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token of ServiceAccount %s/%s: %w", CSIAddonsNamespace, csiAddonsServiceAccount, err)
	}
	return tr.Status.Token, nil
}
