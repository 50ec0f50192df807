package testbed

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// StopAPIServer stops kube-apiserver alone — etcd, the other components and the simulated
// nodes keep running — and returns once its port refuses connections: an API-server outage.
// StartAPIServer brings it back on the same address with the same certificates.
func (c *Cluster) StopAPIServer(ctx context.Context) error {
	api := c.env.ControlPlane.APIServer
	c.logf("stopping kube-apiserver (etcd kept)")
	if err := api.Stop(); err != nil {
		// envtest SIGKILLs it after its StopTimeout and reports that; the port check below
		// is what tells it is gone.
		c.logf("stopping kube-apiserver: %v", err)
	}
	addr := net.JoinHostPort(api.SecureServing.Address, api.SecureServing.Port)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return true, nil
		}
		conn.Close()
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-apiserver to stop listening on %s: %w", addr, err)
	}
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer (same address, certificates
// and etcd, so every client and kubeconfig keeps working) and waits until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.logf("starting kube-apiserver again")
	if err := c.env.ControlPlane.APIServer.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w\n%s", err, TailFile(filepath.Join(c.Dir, APIServerLog), 20))
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		body, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-apiserver to be ready again: %w", err)
	}
	return nil
}

// RestartAPIServer takes kube-apiserver down for downFor and brings it back, ready.
func (c *Cluster) RestartAPIServer(ctx context.Context, downFor time.Duration) error {
	if err := c.StopAPIServer(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(downFor):
	}
	return c.StartAPIServer(ctx)
}
