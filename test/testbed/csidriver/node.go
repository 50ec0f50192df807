package csidriver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	csitest "github.com/kubernetes-csi/csi-test/v5/driver"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// NodeOptions configure the node plugin of one machine.
type NodeOptions struct {
	// Socket is the CSI socket the kubelet calls (at most about 107 bytes).
	Socket string
	// RegistrationDir is the kubelet's plugins_registry directory, where the plugin announces
	// itself as node-driver-registrar would.
	RegistrationDir string
	// NodeID is the node's ID for the driver (the node's name).
	NodeID string
	// VolumesDir is the storage every machine reaches: volume V is the directory VolumesDir/V.
	VolumesDir string
}

// NodePlugin is the stand-in's CSI Node service on one machine, with the kubelet's plugin
// registration in front of it. node-driver-registrar, which registers a real driver, is not
// served by the module proxy here, so the plugin answers the kubelet's registration service
// itself. NodePublishVolume bind-mounts the volume's directory onto the target path in the
// plugin's own mount namespace — the machine's, where its kubelet and containers see it.
type NodePlugin struct {
	server *csitest.CSIDriver
	reg    *grpc.Server
}

// StartNode serves the node plugin and its registration until Stop.
func StartNode(o NodeOptions) (*NodePlugin, error) {
	if o.Socket == "" || o.RegistrationDir == "" || o.NodeID == "" || o.VolumesDir == "" {
		return nil, errors.New("starting the CSI node plugin: socket, registration directory, node ID and volumes directory are required")
	}
	l, err := listenUnix(o.Socket)
	if err != nil {
		return nil, fmt.Errorf("starting the CSI node plugin: %w", err)
	}
	p := &NodePlugin{server: csitest.NewCSIDriver(&csitest.CSIDriverServers{
		Identity: &identity{}, Node: &node{id: o.NodeID, volumes: o.VolumesDir},
	})}
	if err := p.server.Start(l); err != nil {
		l.Close()
		return nil, fmt.Errorf("starting the CSI node plugin: %w", err)
	}
	if err := os.MkdirAll(o.RegistrationDir, 0o755); err != nil {
		p.server.Stop()
		return nil, fmt.Errorf("starting the CSI node plugin's registration: %w", err)
	}
	rl, err := listenUnix(filepath.Join(o.RegistrationDir, Name+"-reg.sock"))
	if err != nil {
		p.server.Stop()
		return nil, fmt.Errorf("starting the CSI node plugin's registration: %w", err)
	}
	p.reg = grpc.NewServer()
	registerapi.RegisterRegistrationServer(p.reg, &registration{endpoint: o.Socket})
	go func() { _ = p.reg.Serve(rl) }()
	return p, nil
}

// Stop stops both servers.
func (p *NodePlugin) Stop() {
	p.reg.Stop()
	p.server.Stop()
}

func listenUnix(path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// registration answers the kubelet's plugin watcher.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: Name, Endpoint: r.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		fmt.Fprintf(os.Stderr, "csi-node: the kubelet refused the registration: %s\n", s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// node is the CSI Node service: publish by bind mount, no staging.
type node struct {
	csi.UnimplementedNodeServer
	id, volumes string
}

func (n *node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.id}, nil
}

func (n *node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NodePublishVolume bind-mounts VolumesDir/<volume> onto the target path; publishing again
// where it is mounted succeeds.
func (n *node) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	vol, target := req.GetVolumeId(), req.GetTargetPath()
	if vol == "" || target == "" || strings.Contains(vol, "/") || vol == ".." {
		return nil, status.Error(codes.InvalidArgument, "a volume_id (no slashes) and a target_path are required")
	}
	src := filepath.Join(n.volumes, vol)
	for _, d := range []string{src, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, status.Errorf(codes.Internal, "creating %s: %v", d, err)
		}
	}
	if mounted(target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind-mounting %s on %s: %v", src, target, err)
	}
	if req.GetReadonly() {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "making %s read-only: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unmounts and removes the target path; one that is gone succeeds.
func (n *node) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if req.GetVolumeId() == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	if mounted(target) {
		if err := unix.Unmount(target, 0); err != nil {
			return nil, status.Errorf(codes.Internal, "unmounting %s: %v", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "removing %s: %v", target, err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// mounted says whether path is a mount point of this mount namespace.
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
