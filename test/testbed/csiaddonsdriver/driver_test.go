package csiaddonsdriver_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/csi-addons/spec/lib/go/fence"
	"github.com/csi-addons/spec/lib/go/identity"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"palisade.dev/palisade/test/testbed/csiaddonsdriver"
)

func startDriver(t *testing.T) (*csiaddonsdriver.Driver, *grpc.ClientConn) {
	t.Helper()
	// t.TempDir can exceed the ~107 bytes a unix socket path may have.
	dir, err := os.MkdirTemp("/tmp", "cad-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d, err := csiaddonsdriver.Start(t.Context(), filepath.Join(dir, "csi-addons.sock"))
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

func cidrs(cs ...string) []*fence.CIDR {
	out := make([]*fence.CIDR, 0, len(cs))
	for _, c := range cs {
		out = append(out, &fence.CIDR{Cidr: c})
	}
	return out
}

func TestIdentity(t *testing.T) {
	_, conn := startDriver(t)
	ids := identity.NewIdentityClient(conn)
	id, err := ids.GetIdentity(t.Context(), &identity.GetIdentityRequest{})
	if err != nil || id.GetName() != csiaddonsdriver.Name {
		t.Fatalf("GetIdentity = %v, %v; want name %s", id, err, csiaddonsdriver.Name)
	}
	caps, err := ids.GetCapabilities(t.Context(), &identity.GetCapabilitiesRequest{})
	if err != nil {
		t.Fatalf("GetCapabilities: %v", err)
	}
	var controller, networkFence bool
	for _, c := range caps.GetCapabilities() {
		controller = controller || c.GetService().GetType() == identity.Capability_Service_CONTROLLER_SERVICE
		networkFence = networkFence || c.GetNetworkFence().GetType() == identity.Capability_NetworkFence_NETWORK_FENCE
		if c.GetNetworkFence().GetType() == identity.Capability_NetworkFence_GET_CLIENTS_TO_FENCE {
			t.Errorf("GetCapabilities advertises GET_CLIENTS_TO_FENCE")
		}
	}
	if !controller || !networkFence {
		t.Errorf("GetCapabilities = %v; want CONTROLLER_SERVICE and NETWORK_FENCE", caps)
	}
	if p, err := ids.Probe(t.Context(), &identity.ProbeRequest{}); err != nil || !p.GetReady().GetValue() {
		t.Fatalf("Probe = %v, %v; want ready", p, err)
	}
}

func TestFenceAndUnfence(t *testing.T) {
	d, conn := startDriver(t)
	fc := fence.NewFenceControllerClient(conn)
	ctx := t.Context()
	params := map[string]string{"clusterID": "c1"}
	secrets := map[string]string{"userKey": "s3cret"}

	if _, err := fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{
		Parameters: params, Secrets: secrets, Cidrs: cidrs("10.9.8.7/32", "10.0.0.0/24")}); err != nil {
		t.Fatalf("FenceClusterNetwork: %v", err)
	}
	// Fencing again is idempotent.
	if _, err := fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: cidrs("10.9.8.7/32")}); err != nil {
		t.Fatalf("FenceClusterNetwork again: %v", err)
	}
	if diff := cmp.Diff([]string{"10.0.0.0/24", "10.9.8.7/32"}, d.Fenced()); diff != "" {
		t.Errorf("Fenced() (-want +got):\n%s", diff)
	}
	list, err := fc.ListClusterFence(ctx, &fence.ListClusterFenceRequest{})
	if err != nil || len(list.GetCidrs()) != 2 {
		t.Errorf("ListClusterFence = %v, %v; want 2 CIDRs", list, err)
	}

	if _, err := fc.UnfenceClusterNetwork(ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: cidrs("10.9.8.7/32", "10.1.1.1/32")}); err != nil {
		t.Fatalf("UnfenceClusterNetwork: %v", err)
	}
	if d.IsFenced("10.9.8.7/32") || !d.IsFenced("10.0.0.0/24") {
		t.Errorf("Fenced() = %v; want only 10.0.0.0/24", d.Fenced())
	}

	want := []csiaddonsdriver.Call{
		{Method: csiaddonsdriver.MethodFence, CIDRs: []string{"10.9.8.7/32", "10.0.0.0/24"}, Parameters: map[string]string{"clusterID": "c1"}, SecretKeys: []string{"userKey"}},
		{Method: csiaddonsdriver.MethodFence, CIDRs: []string{"10.9.8.7/32"}},
		{Method: csiaddonsdriver.MethodUnfence, CIDRs: []string{"10.9.8.7/32", "10.1.1.1/32"}},
	}
	if diff := cmp.Diff(want, d.Calls()); diff != "" {
		t.Errorf("Calls() (-want +got):\n%s", diff)
	}
}

func TestRefuse(t *testing.T) {
	d, conn := startDriver(t)
	fc := fence.NewFenceControllerClient(conn)
	ctx := t.Context()
	if _, err := fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: cidrs("10.0.0.1/32")}); err != nil {
		t.Fatalf("FenceClusterNetwork: %v", err)
	}

	tests := []struct {
		name   string
		refuse error
		want   codes.Code
	}{
		{name: "plain error", refuse: errors.New("storage unreachable"), want: codes.Unavailable},
		{name: "gRPC status", refuse: status.Error(codes.PermissionDenied, "no"), want: codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d.Refuse(tt.refuse)
			_, err := fc.FenceClusterNetwork(ctx, &fence.FenceClusterNetworkRequest{Cidrs: cidrs("10.0.0.2/32")})
			if status.Code(err) != tt.want {
				t.Errorf("FenceClusterNetwork while refused: %v; want code %s", err, tt.want)
			}
			_, err = fc.UnfenceClusterNetwork(ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: cidrs("10.0.0.1/32")})
			if status.Code(err) != tt.want {
				t.Errorf("UnfenceClusterNetwork while refused: %v; want code %s", err, tt.want)
			}
			if diff := cmp.Diff([]string{"10.0.0.1/32"}, d.Fenced()); diff != "" {
				t.Errorf("Fenced() changed while refused (-want +got):\n%s", diff)
			}
		})
	}

	d.Refuse(nil)
	if _, err := fc.UnfenceClusterNetwork(ctx, &fence.UnfenceClusterNetworkRequest{Cidrs: cidrs("10.0.0.1/32")}); err != nil {
		t.Fatalf("UnfenceClusterNetwork after Refuse(nil): %v", err)
	}
	if got := d.Fenced(); len(got) != 0 {
		t.Errorf("Fenced() = %v; want none", got)
	}
	calls := d.Calls()
	if len(calls) != 6 || calls[1].Err == "" || calls[5].Err != "" {
		t.Errorf("Calls() = %+v; want 6 calls, the refused ones with their error", calls)
	}
}

func TestInvalidCIDR(t *testing.T) {
	d, conn := startDriver(t)
	fc := fence.NewFenceControllerClient(conn)
	for _, cs := range [][]*fence.CIDR{nil, cidrs("10.0.0.1"), cidrs("10.0.0.1/32", "nonsense")} {
		_, err := fc.FenceClusterNetwork(t.Context(), &fence.FenceClusterNetworkRequest{Cidrs: cs})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("FenceClusterNetwork(%v) = %v; want InvalidArgument", cs, err)
		}
	}
	if got := d.Fenced(); len(got) != 0 {
		t.Errorf("Fenced() = %v; want none", got)
	}
}

func TestStopRemovesSocket(t *testing.T) {
	d, _ := startDriver(t)
	d.Stop()
	d.Stop()
	if _, err := os.Stat(d.Socket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after Stop: %v", err)
	}
}
