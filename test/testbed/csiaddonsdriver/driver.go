package csiaddonsdriver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/csi-addons/spec/lib/go/fence"
	"github.com/csi-addons/spec/lib/go/identity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Name is the driver name the stand-in reports (GetIdentity): the provisioner of a
// NetworkFenceClass that reaches it.
const Name = "fence.csi.palisade.test"

// Version is the vendor version it reports.
const Version = "0.1.0"

// stopGrace is how long Stop lets calls in flight finish before it closes every connection.
const stopGrace = 2 * time.Second

// Method names recorded in Call.Method.
const (
	MethodFence   = "FenceClusterNetwork"
	MethodUnfence = "UnfenceClusterNetwork"
)

// Call is one FenceClusterNetwork or UnfenceClusterNetwork request the driver received.
type Call struct {
	Method        string            // MethodFence or MethodUnfence
	CIDRs         []string          // as received
	ParameterKeys []string          // sorted
	Parameters    map[string]string // the parameters (not secret: the class's and the NetworkFence's)
	SecretKeys    []string          // sorted; the values are never kept
	Err           string            // the error returned, "" when the call succeeded
}

// Driver is a running stand-in CSI-Addons driver. Its methods are safe for concurrent use.
type Driver struct {
	socket string
	server *grpc.Server

	mu      sync.Mutex
	fenced  map[string]bool
	calls   []Call
	refusal error // returned by fence and unfence calls while set

	stopOnce sync.Once
	stopped  chan struct{}
}

// Start serves the driver on the unix socket socketPath (removed first when it exists; unix
// socket paths are limited to about 107 bytes) until Stop is called or ctx ends.
func Start(ctx context.Context, socketPath string) (*Driver, error) {
	if err := os.Remove(socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("starting CSI-Addons driver: %w", err)
	}
	l, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("starting CSI-Addons driver: %w", err)
	}
	d := &Driver{
		socket:  socketPath,
		server:  grpc.NewServer(),
		fenced:  map[string]bool{},
		stopped: make(chan struct{}),
	}
	identity.RegisterIdentityServer(d.server, &identityServer{})
	fence.RegisterFenceControllerServer(d.server, &fenceServer{d: d})
	go func() { _ = d.server.Serve(l) }()
	go func() {
		select {
		case <-ctx.Done():
			d.Stop()
		case <-d.stopped:
		}
	}()
	return d, nil
}

// Socket is the path of the unix socket the driver serves on.
func (d *Driver) Socket() string { return d.socket }

// Fenced returns the fenced CIDRs, sorted.
func (d *Driver) Fenced() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.fenced))
}

// IsFenced reports whether cidr (as the fence request spelled it) is fenced.
func (d *Driver) IsFenced(cidr string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fenced[cidr]
}

// Calls returns the fence and unfence calls received so far, oldest first.
func (d *Driver) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Call, len(d.calls))
	for i, c := range d.calls {
		c.CIDRs = slices.Clone(c.CIDRs)
		c.Parameters = maps.Clone(c.Parameters)
		c.SecretKeys = slices.Clone(c.SecretKeys)
		out[i] = c
	}
	return out
}

// Refuse makes every following fence and unfence call fail with err, leaving the fenced set
// as it is, until Refuse(nil). An err carrying a gRPC status (status.Error) is returned as
// is; any other becomes codes.Unavailable with err's text, as from a storage backend that
// cannot be reached.
func (d *Driver) Refuse(err error) {
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Unavailable, err.Error())
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refusal = err
}

// Stop stops serving (letting calls in flight finish for a moment), closes every connection
// and removes the socket. It is idempotent.
func (d *Driver) Stop() {
	d.stopOnce.Do(func() {
		close(d.stopped)
		done := make(chan struct{})
		go func() {
			d.server.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(stopGrace):
			d.server.Stop()
		}
		_ = os.Remove(d.socket)
	})
}

// apply records a fence (add true) or unfence call and, unless refused, updates the fenced
// set. Unfencing a CIDR that is not fenced succeeds, as fencing one twice does.
func (d *Driver) apply(method string, cidrs []*fence.CIDR, params, secrets map[string]string, add bool) error {
	call := Call{
		Method:     method,
		Parameters: maps.Clone(params),
		SecretKeys: slices.Sorted(maps.Keys(secrets)),
	}
	for _, c := range cidrs {
		call.CIDRs = append(call.CIDRs, c.GetCidr())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.refusal
	if err == nil {
		err = validateCIDRs(call.CIDRs)
	}
	if err != nil {
		call.Err = err.Error()
		d.calls = append(d.calls, call)
		return err
	}
	for _, c := range call.CIDRs {
		if add {
			d.fenced[c] = true
		} else {
			delete(d.fenced, c)
		}
	}
	d.calls = append(d.calls, call)
	return nil
}

func validateCIDRs(cidrs []string) error {
	if len(cidrs) == 0 {
		return status.Error(codes.InvalidArgument, "no CIDR given")
	}
	for _, c := range cidrs {
		if _, _, err := net.ParseCIDR(c); err != nil {
			return status.Errorf(codes.InvalidArgument, "invalid CIDR %q: %v", c, err)
		}
	}
	return nil
}
