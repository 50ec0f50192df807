package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	csiaddonsv1alpha1 "github.com/csi-addons/kubernetes-csi-addons/api/csiaddons/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/test/testbed/csiaddonsdriver"
)

// The csi-addons set-up of a Cluster started with Options.CSIAddons: the real csi-addons
// manager and sidecar (kubernetes-csi-addons, built by `make testbed`) in front of
// csiaddonsdriver's stand-in driver.
const (
	// CSIAddonsDriverName is the CSI-Addons driver behind the sidecar: the provisioner of
	// NetworkFenceClassName.
	CSIAddonsDriverName = csiaddonsdriver.Name
	// CSIAddonsNamespace holds the sidecar's Pod, its ServiceAccount, its Lease, its
	// CSIAddonsNode and NetworkFenceSecretName.
	CSIAddonsNamespace = "csi-addons-system"
	// CSIAddonsSidecarPod is the Pod object that stands for the sidecar (no kubelet runs
	// it: the sidecar is a child process of the test, and the Pod reports 127.0.0.1 as its
	// IP so that the manager reaches the sidecar there).
	CSIAddonsSidecarPod = "csi-addons-sidecar"
	// CSIAddonsNodeID is the sidecar's --node-id.
	CSIAddonsNodeID = "testbed-storage-controller"
	// CSIAddonsLeaseName is the Lease the sidecar holds as the driver's leader: the
	// normalized driver name (every character outside [a-zA-Z0-9-] replaced by '-') plus
	// "-csi-addons". The manager sends NetworkFence requests only to its holder.
	CSIAddonsLeaseName = "fence-csi-palisade-test-csi-addons"
	// NetworkFenceClassName is the NetworkFenceClass of CSIAddonsDriverName, with
	// NetworkFenceSecretName as its secret.
	NetworkFenceClassName = "palisade-test"
	// NetworkFenceSecretName is the Secret (in CSIAddonsNamespace) the sidecar reads for
	// every fence request and passes to the driver: the v0.14.0 sidecar refuses a request
	// without one.
	NetworkFenceSecretName = "palisade-test-fence"

	// CSIAddonsManagerLog and CSIAddonsSidecarLog are their logs under Cluster.Dir.
	CSIAddonsManagerLog = "csi-addons-manager.log"
	CSIAddonsSidecarLog = "csi-addons-sidecar.log"
)

const (
	csiAddonsModule = "github.com/csi-addons/kubernetes-csi-addons"
	// csiAddonsRunDir, under Dir, is bind-mounted on /run in the sidecar's mount namespace.
	csiAddonsRunDir = "csi-addons-run"
	// saTokenDir is where rest.InClusterConfig reads the token and CA, below /run.
	saTokenDir = "secrets/kubernetes.io/serviceaccount"
	// csiAddonsPoll is how often the start polls the API for the sidecar's registration.
	csiAddonsPoll = 100 * time.Millisecond
)

// csiAddonsCRDDir is config/crd/bases of the kubernetes-csi-addons module in the module cache
// (the version go.mod requires), found with `go list -m`: its CRDs are not copied into this
// repository.
func csiAddonsCRDDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-json", csiAddonsModule).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("finding the csi-addons CRDs (go list -m %s): %w", csiAddonsModule, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("finding the csi-addons CRDs: %w", err)
	}
	if m.Dir == "" {
		return "", fmt.Errorf("finding the csi-addons CRDs: %s is not in the module cache (run `go mod download %s`)", csiAddonsModule, csiAddonsModule)
	}
	dir := filepath.Join(m.Dir, "config", "crd", "bases")
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return "", fmt.Errorf("finding the csi-addons CRDs: no directory %s", dir)
	}
	return dir, nil
}

// startCSIAddons creates the sidecar's API objects and NetworkFenceClassName, serves the
// stand-in driver and launches the real manager and sidecar; waitCSIAddonsReady waits until
// the manager can reach the driver through the sidecar.
func (c *Cluster) startCSIAddons(ctx context.Context, bins binaries) error {
	warmed := c.warmCSIAddonsAPI(ctx)
	podUID, err := c.createCSIAddonsObjects(ctx)
	if err != nil {
		return err
	}
	runDir, err := c.writeServiceAccountFiles(ctx)
	if err != nil {
		return err
	}
	socket, err := c.socketPath("csi-addons.sock", &c.csiAddonsSocketDir)
	if err != nil {
		return err
	}
	// The driver lives until Stop, not until the start's deadline.
	if c.CSIAddons, err = csiaddonsdriver.Start(context.WithoutCancel(ctx), socket); err != nil {
		return err
	}
	if err := c.startCSIAddonsManager(bins); err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	args, err := c.sidecarArgs(bins, runDir, socket, podUID, ports[0])
	if err != nil {
		return err
	}
	c.logf("starting csi-addons sidecar for %s (socket %s, port %d)", CSIAddonsDriverName, socket, ports[0])
	c.csiAddonsSidecar, err = startComponent(csiAddonsSidecarBinary, "unshare", args, filepath.Join(c.Dir, CSIAddonsSidecarLog))
	if err != nil {
		return err
	}
	select {
	case <-warmed:
	case <-ctx.Done():
		return fmt.Errorf("starting the csi-addons chain: %w", ctx.Err())
	}
	return c.createNetworkFenceClass(ctx)
}

// startCSIAddonsManager launches the manager with a system:masters kubeconfig, no leader
// election and neither metrics nor probe server (waitCSIAddonsReady watches what it does).
func (c *Cluster) startCSIAddonsManager(bins binaries) error {
	kubeconfig, err := c.userKubeconfig("csi-addons-manager")
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + CSIAddonsNamespace,
		"--leader-elect=false",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		// With auth the manager sends the token of the Pod it runs in (a fixed file path)
		// over TLS, and the sidecar checks it with a TokenReview; plain gRPC on loopback
		// keeps both away from the host's /var/run/secrets.
		"--enable-auth=false",
	}
	c.logf("starting csi-addons manager")
	c.csiAddonsManager, err = startComponent(csiAddonsManagerBinary, bins.csiAddonsManager, args, filepath.Join(c.Dir, CSIAddonsManagerLog))
	return err
}

// sidecarScript runs as `sh -c sidecarScript sh RUNDIR HOST PORT SIDECAR ARGS...` in a
// private mount namespace: it bind-mounts RUNDIR on the directory behind /var/run, so that
// the sidecar, and only it, finds the ServiceAccount token and CA where
// rest.InClusterConfig looks for them, and runs the sidecar with the API server's address
// in KUBERNETES_SERVICE_HOST and _PORT. The sidecar sees nothing else of the host's /run.
const sidecarScript = `set -e
mount --bind "$1" "$(readlink -f /var/run)"
export KUBERNETES_SERVICE_HOST="$2" KUBERNETES_SERVICE_PORT="$3"
shift 3
exec "$@"`

// sidecarArgs are unshare's arguments that run the sidecar through sidecarScript. The
// sidecar listens on every address (--controller-ip would make the endpoint it registers
// "IP:port", which the v0.14.0 manager no longer accepts: it resolves pod://<pod>.<ns>:port
// through the Pod's status.podIP, 127.0.0.1 here).
func (c *Cluster) sidecarArgs(bins binaries, runDir, socket, podUID string, port int) ([]string, error) {
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return nil, fmt.Errorf("parsing API server address %q: %w", c.Config.Host, err)
	}
	return []string{
		"--mount", "--propagation", "private", "sh", "-c", sidecarScript, "sh",
		runDir, u.Hostname(), u.Port(), bins.csiAddonsSidecar,
		"--csi-addons-address=" + socket,
		"--node-id=" + CSIAddonsNodeID,
		"--controller-port=" + strconv.Itoa(port),
		"--pod=" + CSIAddonsSidecarPod,
		"--namespace=" + CSIAddonsNamespace,
		"--pod-uid=" + podUID,
		"--leader-election-namespace=" + CSIAddonsNamespace,
		// See the manager's --enable-auth=false; the sidecar's auth path would also serve
		// TLS with a self-signed certificate and review the manager's token.
		"--enable-auth=false",
	}, nil
}

// writeServiceAccountFiles writes <Dir>/csi-addons-run/secrets/kubernetes.io/serviceaccount/
// {token,ca.crt,namespace}: a token of the sidecar's ServiceAccount from the TokenRequest
// API, and the API server's serving CA.
func (c *Cluster) writeServiceAccountFiles(ctx context.Context) (string, error) {
	token, err := c.serviceAccountToken(ctx)
	if err != nil {
		return "", err
	}
	runDir := filepath.Join(c.Dir, csiAddonsRunDir)
	dir := filepath.Join(runDir, saTokenDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("writing the sidecar's ServiceAccount files: %w", err)
	}
	for name, data := range map[string][]byte{
		"token":     []byte(token),
		"ca.crt":    c.Config.CAData,
		"namespace": []byte(CSIAddonsNamespace),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return "", fmt.Errorf("writing the sidecar's ServiceAccount files: %w", err)
		}
	}
	return runDir, nil
}

// waitCSIAddonsReady waits until the manager has connected to the sidecar (the sidecar's
// CSIAddonsNode is Connected) and the sidecar holds CSIAddonsLeaseName: from then on the
// manager sends NetworkFence requests through it.
func (c *Cluster) waitCSIAddonsReady(ctx context.Context) error {
	for {
		connected, err := c.csiAddonsNodeConnected(ctx)
		if err == nil && connected {
			if connected, err = c.csiAddonsLeaseHeld(ctx); err == nil && connected {
				return nil
			}
		}
		for _, p := range []*component{c.csiAddonsSidecar, c.csiAddonsManager} {
			if _, done := p.current(); isClosed(done) {
				return fmt.Errorf("waiting for the csi-addons sidecar to register: %s %s\n%s", p.name, p.status(), TailFile(p.log.Name(), 20))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the csi-addons sidecar to register (last error: %v): %w\n%s\n%s", err, ctx.Err(),
				TailFile(c.csiAddonsSidecar.log.Name(), 20), TailFile(c.csiAddonsManager.log.Name(), 20))
		case <-time.After(csiAddonsPoll):
		}
	}
}

func (c *Cluster) csiAddonsNodeConnected(ctx context.Context) (bool, error) {
	var nodes csiaddonsv1alpha1.CSIAddonsNodeList
	if err := c.Client.List(ctx, &nodes, client.InNamespace(CSIAddonsNamespace)); err != nil {
		return false, err
	}
	for _, n := range nodes.Items {
		if n.Spec.Driver.Name == CSIAddonsDriverName && n.Status.State == csiaddonsv1alpha1.CSIAddonsNodeStateConnected {
			return true, nil
		}
	}
	return false, nil
}

func (c *Cluster) csiAddonsLeaseHeld(ctx context.Context) (bool, error) {
	var lease coordinationv1.Lease
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: CSIAddonsNamespace, Name: CSIAddonsLeaseName}, &lease)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	h := lease.Spec.HolderIdentity
	return h != nil && *h == CSIAddonsSidecarPod, nil
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// stopCSIAddonsDriver stops the stand-in driver (once the sidecar is gone: the sidecar exits
// when it loses the driver) and removes its socket directory.
func (c *Cluster) stopCSIAddonsDriver() error {
	if c.CSIAddons != nil {
		c.CSIAddons.Stop()
	}
	if c.csiAddonsSocketDir != "" {
		if err := os.RemoveAll(c.csiAddonsSocketDir); err != nil {
			return fmt.Errorf("removing CSI-Addons socket dir: %w", err)
		}
	}
	return nil
}
