package csidriver_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"palisade.dev/palisade/test/testbed/csidriver"
)

func startDriver(t *testing.T) (*csidriver.Driver, *grpc.ClientConn) {
	t.Helper()
	// t.TempDir can exceed the ~107 bytes a unix socket path may have.
	dir, err := os.MkdirTemp("/tmp", "csid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d, err := csidriver.Start(t.Context(), filepath.Join(dir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	conn, err := grpc.NewClient("unix://"+d.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return d, conn
}

func rwo() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func TestIdentity(t *testing.T) {
	d, conn := startDriver(t)
	ids := csi.NewIdentityClient(conn)
	info, err := ids.GetPluginInfo(t.Context(), &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != csidriver.Name {
		t.Fatalf("GetPluginInfo = %v, %v; want name %s", info, err, csidriver.Name)
	}
	caps, err := ids.GetPluginCapabilities(t.Context(), &csi.GetPluginCapabilitiesRequest{})
	if err != nil || caps.GetCapabilities()[0].GetService().GetType() != csi.PluginCapability_Service_CONTROLLER_SERVICE {
		t.Fatalf("GetPluginCapabilities = %v, %v; want CONTROLLER_SERVICE", caps, err)
	}
	if p, err := ids.Probe(t.Context(), &csi.ProbeRequest{}); err != nil || !p.GetReady().GetValue() {
		t.Fatalf("Probe = %v, %v; want ready", p, err)
	}
	select {
	case <-d.CapabilitiesAsked():
		t.Fatal("CapabilitiesAsked closed before ControllerGetCapabilities")
	default:
	}
	cc, err := csi.NewControllerClient(conn).ControllerGetCapabilities(t.Context(), &csi.ControllerGetCapabilitiesRequest{})
	if err != nil || cc.GetCapabilities()[0].GetRpc().GetType() != csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME {
		t.Fatalf("ControllerGetCapabilities = %v, %v; want PUBLISH_UNPUBLISH_VOLUME", cc, err)
	}
	<-d.CapabilitiesAsked()
}

// An RWO volume published to node-a is refused to node-b (FailedPrecondition) until it is
// unpublished from node-a; publish and unpublish are idempotent.
func TestSingleNodeVolumeRefusedToSecondNode(t *testing.T) {
	d, conn := startDriver(t)
	ctl := csi.NewControllerClient(conn)
	publish := func(node string) error {
		_, err := ctl.ControllerPublishVolume(t.Context(), &csi.ControllerPublishVolumeRequest{
			VolumeId: "vol-1", NodeId: node, VolumeCapability: rwo()})
		return err
	}
	unpublish := func(node string) {
		t.Helper()
		if _, err := ctl.ControllerUnpublishVolume(t.Context(), &csi.ControllerUnpublishVolumeRequest{
			VolumeId: "vol-1", NodeId: node}); err != nil {
			t.Fatalf("unpublishing from %s: %v", node, err)
		}
	}
	for range 2 {
		if err := publish("node-a"); err != nil {
			t.Fatalf("publishing to node-a: %v", err)
		}
	}
	if err := publish("node-b"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("publishing to node-b while on node-a: %v, want FailedPrecondition", err)
	}
	if n, ok := d.Published("vol-1"); !ok || n != "node-a" {
		t.Fatalf("Published = %q, %t; want node-a", n, ok)
	}
	unpublish("node-b") // not published there: a no-op
	d.FailUnpublish(2)
	for i := range 2 {
		if _, err := ctl.ControllerUnpublishVolume(t.Context(), &csi.ControllerUnpublishVolumeRequest{
			VolumeId: "vol-1", NodeId: "node-a"}); status.Code(err) != codes.Unavailable {
			t.Fatalf("unpublish %d with FailUnpublish(2): %v, want Unavailable", i+1, err)
		}
	}
	if n, ok := d.Published("vol-1"); !ok || n != "node-a" || d.UnpublishFailuresLeft() != 0 {
		t.Fatalf("Published = %q, %t after failed unpublishes, %d failures left; want node-a, none left", n, ok, d.UnpublishFailuresLeft())
	}
	attached := true // the backend's word, as EC2's for the EBS CSI driver
	d.SetUnpublishCheck(func(vol, node string) error {
		if attached {
			return errors.New("still attached")
		}
		return nil
	})
	if _, err := ctl.ControllerUnpublishVolume(t.Context(), &csi.ControllerUnpublishVolumeRequest{
		VolumeId: "vol-1", NodeId: "node-a"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("unpublish while the check fails: %v, want FailedPrecondition", err)
	}
	if n, ok := d.Published("vol-1"); !ok || n != "node-a" {
		t.Fatalf("Published = %q, %t after an unpublish the check refused; want node-a", n, ok)
	}
	attached = false
	unpublish("node-a")
	d.SetUnpublishCheck(nil)
	unpublish("node-a")
	if n, ok := d.Published("vol-1"); ok {
		t.Fatalf("Published = %q after unpublishing, want none", n)
	}
	if err := publish("node-b"); err != nil {
		t.Fatalf("publishing to node-b once released: %v", err)
	}
	if n, _ := d.Published("vol-1"); n != "node-b" {
		t.Fatalf("Published = %q, want node-b", n)
	}
}

func TestPublishNeedsCapability(t *testing.T) {
	_, conn := startDriver(t)
	_, err := csi.NewControllerClient(conn).ControllerPublishVolume(t.Context(), &csi.ControllerPublishVolumeRequest{
		VolumeId: "vol-1", NodeId: "node-a"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("publishing without a capability: %v, want InvalidArgument", err)
	}
}

func TestStopRemovesSocket(t *testing.T) {
	d, _ := startDriver(t)
	d.Stop()
	d.Stop()
	if _, err := os.Stat(d.Socket()); !os.IsNotExist(err) {
		t.Fatalf("socket %s after Stop: %v, want gone", d.Socket(), err)
	}
}
