package csiaddonsdriver

import (
	"context"

	"github.com/csi-addons/spec/lib/go/fence"
	"github.com/csi-addons/spec/lib/go/identity"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identityServer answers as a controller plugin with the NetworkFence capability. It does not
// advertise GET_CLIENTS_TO_FENCE, so the manager never asks for fence clients.
type identityServer struct {
	identity.UnimplementedIdentityServer
}

func (identityServer) GetIdentity(context.Context, *identity.GetIdentityRequest) (*identity.GetIdentityResponse, error) {
	return &identity.GetIdentityResponse{Name: Name, VendorVersion: Version}, nil
}

func (identityServer) GetCapabilities(context.Context, *identity.GetCapabilitiesRequest) (*identity.GetCapabilitiesResponse, error) {
	return &identity.GetCapabilitiesResponse{Capabilities: []*identity.Capability{
		{Type: &identity.Capability_Service_{Service: &identity.Capability_Service{
			Type: identity.Capability_Service_CONTROLLER_SERVICE,
		}}},
		{Type: &identity.Capability_NetworkFence_{NetworkFence: &identity.Capability_NetworkFence{
			Type: identity.Capability_NetworkFence_NETWORK_FENCE,
		}}},
	}}, nil
}

func (identityServer) Probe(context.Context, *identity.ProbeRequest) (*identity.ProbeResponse, error) {
	return &identity.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// fenceServer is the FenceController service over the Driver's fenced set.
type fenceServer struct {
	fence.UnimplementedFenceControllerServer
	d *Driver
}

func (s *fenceServer) FenceClusterNetwork(_ context.Context, req *fence.FenceClusterNetworkRequest) (*fence.FenceClusterNetworkResponse, error) {
	if err := s.d.apply(MethodFence, req.GetCidrs(), req.GetParameters(), req.GetSecrets(), true); err != nil {
		return nil, err
	}
	return &fence.FenceClusterNetworkResponse{}, nil
}

func (s *fenceServer) UnfenceClusterNetwork(_ context.Context, req *fence.UnfenceClusterNetworkRequest) (*fence.UnfenceClusterNetworkResponse, error) {
	if err := s.d.apply(MethodUnfence, req.GetCidrs(), req.GetParameters(), req.GetSecrets(), false); err != nil {
		return nil, err
	}
	return &fence.UnfenceClusterNetworkResponse{}, nil
}

func (s *fenceServer) ListClusterFence(context.Context, *fence.ListClusterFenceRequest) (*fence.ListClusterFenceResponse, error) {
	resp := &fence.ListClusterFenceResponse{}
	for _, c := range s.d.Fenced() {
		resp.Cidrs = append(resp.Cidrs, &fence.CIDR{Cidr: c})
	}
	return resp, nil
}

// GetFenceClients answers with no clients: the driver does not advertise
// GET_CLIENTS_TO_FENCE, and a caller that asks anyway gets nothing to fence.
func (s *fenceServer) GetFenceClients(context.Context, *fence.GetFenceClientsRequest) (*fence.GetFenceClientsResponse, error) {
	return &fence.GetFenceClientsResponse{}, nil
}
