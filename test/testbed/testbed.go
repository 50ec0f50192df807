package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	csiaddonsv1alpha1 "github.com/csi-addons/kubernetes-csi-addons/api/csiaddons/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencingv1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/testbed/csiaddonsdriver"
	"palisade.dev/palisade/test/testbed/csidriver"
)

// DefaultControllers are the kube-controller-manager controllers a Cluster runs unless
// Options.Controllers says otherwise: everything that decides what happens to the pods and
// volumes of a failed node (taint-eviction-controller included: without it a NoExecute taint,
// the out-of-service taint among them, never makes a pod terminating).
var DefaultControllers = []string{
	"pod-garbage-collector-controller",          // podgc
	"node-lifecycle-controller",                 // nodelifecycle
	"taint-eviction-controller",                 // taint-eviction-controller
	"persistentvolume-attach-detach-controller", // attachdetach
	"persistentvolume-binder-controller",        // persistentvolume-binder
	"statefulset-controller",                    // statefulset
	"replicaset-controller",                     // replicaset
	"deployment-controller",                     // deployment
	"garbage-collector-controller",              // garbagecollector
	"serviceaccount-token-controller",           // serviceaccount-token
}

const (
	startTimeout      = 60 * time.Second
	apiServerStopWait = 3 * time.Second
	componentStopWait = 3 * time.Second
)

// Options configures a Cluster. The zero value is a complete control plane with Palisade's CRDs.
type Options struct {
	// CRDDirs are installed before Start returns. Default: the chart's CRDs,
	// <module root>/charts/palisade/files/crds, skipped when it does not exist; a directory
	// without YAML installs nothing. An empty, non-nil slice installs no CRD.
	CRDDirs []string
	// Controllers is kube-controller-manager's --controllers (canonical names or their
	// aliases, e.g. "podgc"). Default: DefaultControllers.
	Controllers []string
	// NodeMonitorGracePeriod is kube-controller-manager's --node-monitor-grace-period;
	// 0 keeps its default (50s).
	NodeMonitorGracePeriod time.Duration
	// ExtraKCMFlags are appended to kube-controller-manager's flags (later flags win).
	ExtraKCMFlags []string
	// NoCSIAttacher leaves out the CSI stack that runs by default: the CSIDriver object
	// CSIDriverName (attachRequired), csidriver's plugin (in-process) and the real CSI
	// external-attacher in front of it, which marks VolumeAttachments attached.
	NoCSIAttacher bool
	// Logf, when set, receives progress messages from Start and Stop (never afterwards).
	Logf func(format string, args ...any)
	// AuditLog makes kube-apiserver write an audit log (AuditLogPath) of every write to
	// Nodes, Pods, VolumeAttachments and NodeFences, with request and response objects: the
	// API's own record of what was released when, which the chaos checker reads.
	AuditLog bool
	// CSIAddons runs the real csi-addons NetworkFence chain: the kubernetes-csi-addons CRDs
	// (from the module cache), the real csi-addons manager and sidecar, and
	// csiaddonsdriver's stand-in driver behind them (Cluster.CSIAddons), with
	// NetworkFenceClassName for it. Start returns once the manager reaches the driver.
	CSIAddons bool
	// InCluster lets pods on real machines reach the API server as in-cluster clients do,
	// through the Service kubernetes (see incluster.go): the serving certificate also names
	// its ClusterIP and DNS names, and the endpoints are the test's to set
	// (SetKubernetesEndpoint), because the API server listens on the host's loopback, which
	// no pod reaches.
	InCluster bool
	// FeatureGates is kube-apiserver's --feature-gates, e.g. "ContainerStopSignals=true" for
	// pods' lifecycle.stopSignal (alpha and off by default in 1.37: the API server drops the
	// field without it); "" sets none.
	FeatureGates string
}

// Cluster is a running control plane: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and (unless Options.NoCSIAttacher) the CSI external-attacher with its plugin.
// Stop it with Stop.
type Cluster struct {
	Config *rest.Config         // admin (system:masters)
	Scheme *runtime.Scheme      // client-go kinds, Palisade's fencing.palisade.dev/v1alpha1 and csiaddons.openshift.io/v1alpha1
	Client client.Client        // controller-runtime client, uncached
	Kube   kubernetes.Interface // client-go clientset
	Dir    string               // kubeconfigs, certificates, etcd data and the logs of every process
	CSI    *csidriver.Driver    // the CSI plugin behind the external-attacher; nil with NoCSIAttacher
	// CSIAddons is the stand-in CSI-Addons driver behind the real csi-addons sidecar and
	// manager; nil without Options.CSIAddons. Stop stops it after the sidecar (which exits
	// when it loses the driver): leave stopping it to Stop.
	CSIAddons *csiaddonsdriver.Driver

	logf      func(format string, args ...any)
	env       *envtest.Environment
	logs      []*os.File
	kcm       *component
	scheduler *component
	attacher  *component
	socketDir string // holds the CSI socket when Dir is too long for one

	csiAddonsManager   *component
	csiAddonsSidecar   *component
	csiAddonsSocketDir string // holds the CSI-Addons socket when Dir is too long for one

	stopOnce sync.Once
	stopErr  error
}

// Log file names under Cluster.Dir.
const (
	EtcdLog      = "etcd.log"
	APIServerLog = "kube-apiserver.log"
	KCMLog       = "kcm.log"
	SchedulerLog = "scheduler.log"
	// CSIAttacherLog is the CSI external-attacher's log.
	CSIAttacherLog = "csi-attacher.log"
)

// Start runs a control plane and returns once kube-apiserver serves, the CRDs are
// established, kube-controller-manager runs its controllers, kube-scheduler is ready, the CSI
// external-attacher has connected to its plugin and the default and kube-node-lease namespaces
// exist. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	began := time.Now()
	bins, err := findBinaries(!opts.NoCSIAttacher, opts.CSIAddons)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if opts.CSIAddons {
		crds, err := csiAddonsCRDDir(ctx)
		if err != nil {
			return nil, err
		}
		opts.CRDDirs = append(slices.Clone(opts.CRDDirs), crds)
	}
	dir, err := os.MkdirTemp("", "palisade-testbed-")
	if err != nil {
		return nil, fmt.Errorf("starting test bed: %w", err)
	}
	c := &Cluster{Dir: dir, logf: opts.Logf}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := c.start(ctx, bins, opts); err != nil {
		if stopErr := c.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, err
	}
	c.logf("test bed ready in %s (dir %s, API server %s)", time.Since(began).Round(time.Millisecond), dir, c.Config.Host)
	return c, nil
}

func (o Options) withDefaults() Options {
	if o.CRDDirs == nil {
		o.CRDDirs = defaultCRDDirs()
	}
	if len(o.Controllers) == 0 {
		o.Controllers = DefaultControllers
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

func (c *Cluster) start(ctx context.Context, bins binaries, opts Options) error {
	if err := c.startAPIServer(bins, opts); err != nil {
		return err
	}
	if err := c.writeKubeconfig(c.KubeconfigPath(), c.Config); err != nil {
		return err
	}
	if !opts.NoCSIAttacher {
		if err := c.startCSI(ctx, bins); err != nil {
			return err
		}
	}
	// The csi-addons chain needs nothing from kube-controller-manager: it boots meanwhile.
	if opts.CSIAddons {
		if err := c.startCSIAddons(ctx, bins); err != nil {
			return err
		}
	}
	if err := c.startKCMAndScheduler(ctx, bins, opts); err != nil {
		return err
	}
	if !opts.NoCSIAttacher {
		if err := c.waitCSIReady(ctx); err != nil {
			return err
		}
	}
	if opts.CSIAddons {
		if err := c.waitCSIAddonsReady(ctx); err != nil {
			return err
		}
	}
	return c.waitForNamespaces(ctx, "default", "kube-node-lease")
}

// StartT starts a Cluster for a test or benchmark and stops it in t.Cleanup, failing the test
// when either goes wrong. Options.Logf defaults to t.Logf. When the test has failed, the tails
// of kcm.log and csi-attacher.log are logged before the Cluster is stopped.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	c, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting test bed: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(TailFile(filepath.Join(c.Dir, KCMLog), 40))
			if c.attacher != nil {
				t.Log(TailFile(filepath.Join(c.Dir, CSIAttacherLog), 20))
			}
			if c.csiAddonsManager != nil {
				t.Log(TailFile(filepath.Join(c.Dir, CSIAddonsManagerLog), 20))
				t.Log(TailFile(filepath.Join(c.Dir, CSIAddonsSidecarLog), 20))
			}
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping test bed: %v", err)
		}
	})
	return c
}

// Stop stops kube-scheduler, kube-controller-manager and the CSI external-attacher, then the
// CSI plugin, then kube-apiserver (SIGKILL after 3s), then etcd, and removes Dir. No process of
// the Cluster is left once it returns. It is idempotent.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	began := time.Now()
	errs := c.stopComponents()
	if err := c.stopCSIAddonsDriver(); err != nil {
		errs = append(errs, err)
	}
	if err := c.stopCSI(); err != nil {
		errs = append(errs, err)
	}
	if c.env != nil {
		// envtest SIGKILLs kube-apiserver after its StopTimeout and reports that as an error;
		// what matters is that nothing is left, which killLeftovers makes sure of.
		if err := c.env.Stop(); err != nil {
			c.logf("stopping envtest: %v", err)
		}
	}
	if err := killLeftovers(c.Dir, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, f := range c.logs {
		f.Close()
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("removing test bed dir: %w", err))
	}
	c.logf("test bed stopped in %s", time.Since(began).Round(time.Millisecond))
	return errors.Join(errs...)
}

// stopComponents stops kube-scheduler, kube-controller-manager, the external-attacher and the
// csi-addons manager and sidecar concurrently.
func (c *Cluster) stopComponents() []error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, p := range []*component{c.scheduler, c.kcm, c.attacher, c.csiAddonsManager, c.csiAddonsSidecar} {
		if p == nil {
			continue
		}
		wg.Go(func() {
			if err := p.stop(componentStopWait); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

// KubeconfigPath is the admin kubeconfig (system:masters) of the Cluster, under Dir.
func (c *Cluster) KubeconfigPath() string {
	return filepath.Join(c.Dir, "admin.kubeconfig")
}

// WriteKubeconfig writes the admin kubeconfig to path, e.g. for kubectl or the demo's user.
func (c *Cluster) WriteKubeconfig(path string) error {
	return c.writeKubeconfig(path, c.Config)
}

// WriteKubeconfigVia writes the admin kubeconfig to path with the API server at server (as a
// process in a network namespace reaches it, e.g. through a netns relay), verifying its
// certificate for the name "localhost", which it holds.
func (c *Cluster) WriteKubeconfigVia(path, server string) error {
	cfg := rest.CopyConfig(c.Config)
	cfg.Host = "https://" + server
	cfg.TLSClientConfig.ServerName = "localhost"
	return c.writeKubeconfig(path, cfg)
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	if err := fencingv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	if err := csiaddonsv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	return s, nil
}
