package csidriver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identity is the CSI Identity service.
type identity struct {
	csi.UnimplementedIdentityServer
}

func (identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: Name, VendorVersion: Version}, nil
}

func (identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
		}},
	}}}, nil
}

func (identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// controller is the CSI Controller service: publish and unpublish only.
type controller struct {
	csi.UnimplementedControllerServer
	d *Driver
}

func (c *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	c.d.capsOnce.Do(func() { close(c.d.capsAsked) })
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{
			Type: csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		}},
	}}}, nil
}

// ControllerPublishVolume records the volume as published to the node. Like a cloud disk, a
// volume with a single-node access mode cannot be published to a second node while it is
// published to another: FailedPrecondition, until it is unpublished from there.
func (c *controller) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	vol, node, volCap := req.GetVolumeId(), req.GetNodeId(), req.GetVolumeCapability()
	switch {
	case vol == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case node == "":
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	case volCap == nil || volCap.GetAccessMode() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability with an access mode is required")
	}
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	nodes := d.published[vol]
	if nodes[node] {
		return &csi.ControllerPublishVolumeResponse{}, nil // already published there: idempotent
	}
	if singleNode(volCap.GetAccessMode().GetMode()) && len(nodes) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition,
			"volume %s is published to node %s; a single-node volume cannot be published to %s too",
			vol, d.publishedNodes(vol)[0], node)
	}
	if nodes == nil {
		nodes = map[string]bool{}
		d.published[vol] = nodes
	}
	nodes[node] = true
	return &csi.ControllerPublishVolumeResponse{}, nil
}

// ControllerUnpublishVolume removes the volume from the node (from every node when node_id is
// empty); unpublishing a volume that is not published there succeeds.
func (c *controller) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	vol, node := req.GetVolumeId(), req.GetNodeId()
	if vol == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failUnpublish > 0 {
		d.failUnpublish--
		return nil, status.Errorf(codes.Unavailable, "the storage backend is busy: volume %s stays published to %v (a failure the test asked for)", vol, d.publishedNodes(vol))
	}
	if d.unpublishCheck != nil {
		if err := d.unpublishCheck(vol, node); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s stays published to %v: %v", vol, d.publishedNodes(vol), err)
		}
	}
	if node == "" {
		delete(d.published, vol)
	} else {
		delete(d.published[vol], node)
		if len(d.published[vol]) == 0 {
			delete(d.published, vol)
		}
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// singleNode reports whether mode lets only one node use the volume at a time.
func singleNode(mode csi.VolumeCapability_AccessMode_Mode) bool {
	switch mode {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}
