package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"palisade.dev/palisade/test/testbed/csidriver"
)

// CSIDriverName is the CSI driver of the test bed's volumes: csidriver's plugin, behind the
// real external-attacher.
const CSIDriverName = csidriver.Name

// maxSocketPath keeps a unix socket path under the kernel's limit (108 bytes with the NUL).
const maxSocketPath = 100

// csiAttacherArgs are the flags of the external-attacher besides its address and kubeconfig.
var csiAttacherArgs = []string{
	"--leader-election=false",
	"--timeout=5s",
	"--worker-threads=4",
	"--v=3",
}

// startCSI creates the CSIDriver object (attachRequired), serves csidriver's plugin in-process
// and launches the external-attacher in front of it; waitCSIReady waits for the attacher.
func (c *Cluster) startCSI(ctx context.Context, bins binaries) error {
	obj := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: CSIDriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       ptr.To(true),
			PodInfoOnMount:       ptr.To(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		},
	}
	if _, err := c.Kube.StorageV1().CSIDrivers().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating CSIDriver %s: %w", CSIDriverName, err)
	}
	socket, err := c.socketPath("csi.sock", &c.socketDir)
	if err != nil {
		return err
	}
	// The plugin lives until Stop, not until the start's deadline.
	if c.CSI, err = csidriver.Start(context.WithoutCancel(ctx), socket); err != nil {
		return err
	}
	kubeconfig, err := c.userKubeconfig("system:csi-attacher")
	if err != nil {
		return err
	}
	args := append([]string{"--csi-address=" + socket, "--kubeconfig=" + kubeconfig}, csiAttacherArgs...)
	c.logf("starting csi-attacher for %s (socket %s)", CSIDriverName, socket)
	c.attacher, err = startComponent(csiAttacherBinary, bins.csiAttacher, args, filepath.Join(c.Dir, CSIAttacherLog))
	return err
}

// socketPath is <Dir>/<name>, or <name> in a short directory of its own under /tmp (kept in
// *dir, removed at Stop) when Dir is too long for a unix socket path.
func (c *Cluster) socketPath(name string, dir *string) (string, error) {
	if p := filepath.Join(c.Dir, name); len(p) <= maxSocketPath {
		return p, nil
	}
	d, err := os.MkdirTemp("/tmp", "psock-")
	if err != nil {
		return "", fmt.Errorf("creating a directory for socket %s: %w", name, err)
	}
	*dir = d
	return filepath.Join(d, name), nil
}

// waitCSIReady waits until the external-attacher has asked the plugin for its controller
// capabilities, its last step before it starts watching VolumeAttachments.
func (c *Cluster) waitCSIReady(ctx context.Context) error {
	_, exited := c.attacher.current()
	select {
	case <-c.CSI.CapabilitiesAsked():
		return nil
	case <-exited:
		return fmt.Errorf("waiting for csi-attacher: it %s\n%s", c.attacher.status(), TailFile(c.attacher.log.Name(), 20))
	case <-ctx.Done():
		return fmt.Errorf("waiting for csi-attacher: %w\n%s", ctx.Err(), TailFile(c.attacher.log.Name(), 20))
	}
}

// stopCSI stops the plugin (once the attacher is gone) and removes its socket directory.
func (c *Cluster) stopCSI() error {
	if c.CSI != nil {
		c.CSI.Stop()
	}
	if c.socketDir != "" {
		if err := os.RemoveAll(c.socketDir); err != nil {
			return fmt.Errorf("removing CSI socket dir: %w", err)
		}
	}
	return nil
}

// StopCSIAttacher stops the CSI external-attacher alone (its plugin keeps serving): an
// attacher that is down, as while its pod is rescheduled. StartCSIAttacher starts it again with
// the same flags, logging to CSIAttacherLog+".restarted" (the first log is kept).
func (c *Cluster) StopCSIAttacher() error {
	c.logf("stopping csi-attacher")
	return c.attacher.stop(componentStopWait)
}

// StartCSIAttacher starts the external-attacher again after StopCSIAttacher.
func (c *Cluster) StartCSIAttacher() error {
	c.logf("starting csi-attacher again")
	old := c.attacher
	p, err := startComponent(old.name, old.path, old.args, filepath.Join(c.Dir, CSIAttacherLog+".restarted"))
	if err != nil {
		return err
	}
	c.attacher = p
	return nil
}
