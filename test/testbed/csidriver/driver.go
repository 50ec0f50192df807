package csidriver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"

	csitest "github.com/kubernetes-csi/csi-test/v5/driver"
)

// Name is the CSI driver name the plugin reports (GetPluginInfo).
const Name = "rwo.csi.palisade.dev"

// Version is the vendor version the plugin reports.
const Version = "0.1.0"

// Driver is a running CSI controller plugin. Its methods are safe for concurrent use.
type Driver struct {
	socket string
	server *csitest.CSIDriver

	mu        sync.Mutex
	published map[string]map[string]bool // volume ID → node IDs
	// failUnpublish is how many ControllerUnpublishVolume calls are still to fail (FailUnpublish).
	failUnpublish int
	// unpublishCheck, when set, fails every ControllerUnpublishVolume it returns an error for
	// (SetUnpublishCheck).
	unpublishCheck func(volumeID, nodeID string) error
	capsAsked      chan struct{} // closed at the first ControllerGetCapabilities
	capsOnce       sync.Once
	stopOnce       sync.Once
	stopped        chan struct{}
}

// Start serves the plugin on the unix socket socketPath (removed first when it exists; unix
// socket paths are limited to about 107 bytes) until Stop is called or ctx ends.
func Start(ctx context.Context, socketPath string) (*Driver, error) {
	if err := os.Remove(socketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("starting CSI driver: %w", err)
	}
	l, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("starting CSI driver: %w", err)
	}
	d := &Driver{
		socket:    socketPath,
		published: map[string]map[string]bool{},
		capsAsked: make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	d.server = csitest.NewCSIDriver(&csitest.CSIDriverServers{
		Identity:   &identity{},
		Controller: &controller{d: d},
	})
	if err := d.server.Start(l); err != nil {
		l.Close()
		return nil, fmt.Errorf("starting CSI driver: %w", err)
	}
	go func() {
		select {
		case <-ctx.Done():
			d.Stop()
		case <-d.stopped:
		}
	}()
	return d, nil
}

// Socket is the path of the unix socket the plugin serves on.
func (d *Driver) Socket() string { return d.socket }

// CapabilitiesAsked is closed once a client has called ControllerGetCapabilities: the last
// call the external-attacher makes before it starts its controller.
func (d *Driver) CapabilitiesAsked() <-chan struct{} { return d.capsAsked }

// Published returns the node volumeID is published to. For a volume published to several
// nodes (a multi-node access mode) it returns the first in lexical order.
func (d *Driver) Published(volumeID string) (node string, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nodes := d.publishedNodes(volumeID)
	if len(nodes) == 0 {
		return "", false
	}
	return nodes[0], true
}

// FailUnpublish makes the next n ControllerUnpublishVolume calls fail with Unavailable, and
// change nothing: a backend busy for a moment, as after an outage.
func (d *Driver) FailUnpublish(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failUnpublish = n
}

// SetUnpublishCheck makes every ControllerUnpublishVolume that check fails for fail with
// FailedPrecondition and the check's words, changing nothing: a driver whose detach waits for
// its backend (the EBS CSI driver's ControllerUnpublishVolume does not return while EC2 lists
// the volume attached, as to an impaired instance). nil removes the check.
func (d *Driver) SetUnpublishCheck(check func(volumeID, nodeID string) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unpublishCheck = check
}

// UnpublishFailuresLeft is how many of FailUnpublish's failures are still to come.
func (d *Driver) UnpublishFailuresLeft() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failUnpublish
}

// publishedNodes lists the nodes volumeID is published to, sorted; d.mu must be held.
func (d *Driver) publishedNodes(volumeID string) []string {
	var nodes []string
	for n := range d.published[volumeID] {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	return nodes
}

// Stop stops serving, closes every connection and removes the socket. It is idempotent.
func (d *Driver) Stop() {
	d.stopOnce.Do(func() {
		close(d.stopped)
		d.server.Stop()
		_ = os.Remove(d.socket)
	})
}
