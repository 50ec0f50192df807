package realscene

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/gobin"
	"palisade.dev/palisade/test/testbed/machine"
)

// StorageClass is the class of the witness StatefulSet's RWO volumes (static PVs, one per
// replica, of the test bed's CSI driver).
const StorageClass = "witness"

// CSIDaemon is the name of the machines' CSI node plugin daemon.
const CSIDaemon = "csi-node"

// volumes is the scene's storage: the CSI node plugin binary and the directory that holds
// every volume, which all machines reach (a SAN's LUNs).
type volumes struct {
	bin, dir string
}

func setupVolumes(t testing.TB) *volumes {
	t.Helper()
	bin, err := gobin.Build("test/cmd/csi-node")
	if err != nil {
		t.Fatal(err)
	}
	return &volumes{bin: bin, dir: t.TempDir()}
}

// daemon is a machine's CSI node plugin, registered with its kubelet.
func (v *volumes) daemon() machine.Daemon {
	return machine.Daemon{Name: CSIDaemon, Path: v.bin, Args: []string{"--socket", "$(RUN_DIR)/csi.sock",
		"--registration-dir", "$(KUBELET_DIR)/plugins_registry", "--node-id", "$(NODE_NAME)", "--volumes-dir", v.dir}}
}

// createPVs creates replica i's PersistentVolume for each replica, pre-bound to the claim the
// StatefulSet will make for it.
func (s *Scene) createPVs(t testing.TB, replicas int) {
	t.Helper()
	for i := range replicas {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv-" + PodName(i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: StorageClass,
				ClaimRef:         &corev1.ObjectReference{Namespace: "default", Name: claimName(i)},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
					Driver: testbed.CSIDriverName, VolumeHandle: PodName(i)}},
			},
		}
		if err := s.Cluster.Client.Create(context.Background(), pv); err != nil {
			t.Fatal(err)
		}
	}
}

// claimName is the StatefulSet's claim for replica i.
func claimName(i int) string { return fmt.Sprintf("data-%s", PodName(i)) }

// claimTemplate is the StatefulSet's volume claim template, mounted at /data.
func claimTemplate() corev1.PersistentVolumeClaim {
	class := StorageClass
	return corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// VolumeDir is the directory holding replica i's volume, as the storage keeps it.
func (s *Scene) VolumeDir(i int) string {
	if s.volumes == nil {
		return ""
	}
	return filepath.Join(s.volumes.dir, PodName(i))
}
