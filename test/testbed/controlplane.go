package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// saSigningKey is the service-account signing key envtest writes into the API server's CertDir.
const saSigningKey = "sa-signer.key"

// envtestNamespaceWait is the error envtest returns when the default namespace did not appear
// within its fixed 5 s of kube-apiserver answering.
const envtestNamespaceWait = "default namespace didn't register within deadline"

// startAPIServer runs etcd and kube-apiserver through envtest, installs the CRDs and builds
// the admin clients. envtest gives kube-apiserver a fixed 5 s, not configurable, to create the
// default namespace; on a loaded machine its first start can take longer (seen once in a
// fresh-clone run, with the namespace a second late), and then the control plane starts once
// more from scratch.
func (c *Cluster) startAPIServer(bins binaries, opts Options) error {
	err := c.startAPIServerOnce(bins, opts)
	if err == nil || !strings.Contains(err.Error(), envtestNamespaceWait) {
		return err
	}
	c.logf("kube-apiserver took longer than envtest's fixed 5 s to create the default namespace; starting etcd and kube-apiserver again")
	_ = c.env.Stop()
	for _, d := range []string{c.env.ControlPlane.Etcd.DataDir, c.env.ControlPlane.APIServer.CertDir} {
		if rmErr := os.RemoveAll(d); rmErr != nil {
			return errors.Join(err, rmErr)
		}
	}
	return c.startAPIServerOnce(bins, opts)
}

func (c *Cluster) startAPIServerOnce(bins binaries, opts Options) error {
	crdDirs := opts.CRDDirs
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	etcdLog, err := c.createLog(EtcdLog)
	if err != nil {
		return err
	}
	apiLog, err := c.createLog(APIServerLog)
	if err != nil {
		return err
	}
	c.env = &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			Etcd: &envtest.Etcd{Path: bins.etcd, DataDir: filepath.Join(c.Dir, "etcd"), Out: etcdLog, Err: etcdLog},
			APIServer: &envtest.APIServer{
				Path: bins.apiServer, CertDir: filepath.Join(c.Dir, "apiserver"), Out: apiLog, Err: apiLog,
			},
		},
		Scheme:                   scheme,
		CRDDirectoryPaths:        crdDirs,
		ControlPlaneStartTimeout: 30 * time.Second,
		ControlPlaneStopTimeout:  apiServerStopWait,
	}
	for _, d := range []string{c.env.ControlPlane.Etcd.DataDir, c.env.ControlPlane.APIServer.CertDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("starting kube-apiserver: %w", err)
		}
	}
	if opts.AuditLog {
		if err := c.configureAudit(c.env.ControlPlane.APIServer); err != nil {
			return err
		}
	}
	if opts.InCluster {
		if err := configureInCluster(c.env.ControlPlane.APIServer); err != nil {
			return err
		}
	}
	if opts.FeatureGates != "" {
		c.env.ControlPlane.APIServer.Configure().Set("feature-gates", opts.FeatureGates)
	}
	c.logf("starting etcd and kube-apiserver (CRDs from %v)", crdDirs)
	cfg, err := c.env.Start()
	if err != nil {
		return fmt.Errorf("starting etcd and kube-apiserver: %w\n%s", err, TailFile(apiLog.Name(), 20))
	}
	return c.buildClients(cfg, scheme)
}

func (c *Cluster) buildClients(cfg *rest.Config, scheme *runtime.Scheme) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building clientset: %w", err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("building client: %w", err)
	}
	c.Config, c.Scheme, c.Kube, c.Client = cfg, scheme, kube, cl
	return nil
}

func (c *Cluster) createLog(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(c.Dir, name))
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", name, err)
	}
	c.logs = append(c.logs, f)
	return f, nil
}

// userKubeconfig provisions a system:masters user and writes its kubeconfig under Dir.
func (c *Cluster) userKubeconfig(user string) (string, error) {
	u, err := c.env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("provisioning user %s: %w", user, err)
	}
	path := filepath.Join(c.Dir, strings.TrimPrefix(user, "system:")+".kubeconfig")
	return path, c.writeKubeconfig(path, u.Config())
}

// writeKubeconfig writes a kubeconfig equivalent to cfg (certificates inlined) to path.
func (c *Cluster) writeKubeconfig(path string, cfg *rest.Config) error {
	const name = "palisade-testbed"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, TLSServerName: cfg.ServerName}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// Components says whether kube-controller-manager and kube-scheduler run, or how they ended
// (a failing test's dump: they are not restarted when they exit).
func (c *Cluster) Components() string {
	return fmt.Sprintf("kube-controller-manager %s, kube-scheduler %s", c.kcm.status(), c.scheduler.status())
}

// startKCMAndScheduler launches kube-controller-manager and kube-scheduler and waits until
// both are effective.
func (c *Cluster) startKCMAndScheduler(ctx context.Context, bins binaries, opts Options) error {
	kcmArgs, err := c.kcmArgs(opts)
	if err != nil {
		return err
	}
	schedArgs, err := c.schedulerArgs()
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	kcmArgs = append(kcmArgs, "--secure-port="+strconv.Itoa(ports[0]))
	schedArgs = append(schedArgs, "--secure-port="+strconv.Itoa(ports[1]))
	kcmArgs = append(kcmArgs, opts.ExtraKCMFlags...)
	c.logf("starting kube-controller-manager (controllers %s) and kube-scheduler", strings.Join(opts.Controllers, ","))
	// Both are supervised, as static pods are: the scheduler exits on purpose when its cache is
	// corrupted (it was, after an API server was killed in a chaos run) and is meant to be
	// started again.
	if c.kcm, err = superviseComponent(kcmBinary, bins.kcm, kcmArgs, filepath.Join(c.Dir, KCMLog)); err != nil {
		return err
	}
	if c.scheduler, err = superviseComponent(schedulerBinary, bins.scheduler, schedArgs, filepath.Join(c.Dir, SchedulerLog)); err != nil {
		return err
	}
	// The controllers register their health checks (all named "...-controller") once built;
	// the scheduler's /readyz includes the sync of its event handlers.
	kcmURL := fmt.Sprintf("https://127.0.0.1:%d/healthz?verbose", ports[0])
	if err := c.kcm.waitHealthy(ctx, kcmURL, func(b []byte) bool { return bytes.Contains(b, []byte("-controller ok")) }); err != nil {
		return err
	}
	schedURL := fmt.Sprintf("https://127.0.0.1:%d/readyz", ports[1])
	return c.scheduler.waitHealthy(ctx, schedURL, func([]byte) bool { return true })
}

func (c *Cluster) kcmArgs(opts Options) ([]string, error) {
	kubeconfig, err := c.userKubeconfig("system:kube-controller-manager")
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(c.Dir, "ca.crt")
	if err := os.WriteFile(caFile, c.Config.CAData, 0o600); err != nil {
		return nil, fmt.Errorf("writing CA file: %w", err)
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--controllers=" + strings.Join(opts.Controllers, ","),
		"--service-account-private-key-file=" + filepath.Join(c.env.ControlPlane.APIServer.CertDir, saSigningKey),
		"--root-ca-file=" + caFile,
		"--use-service-account-credentials=false",
		"--kube-api-qps=100",
		"--kube-api-burst=200",
		"--v=2",
	}
	if opts.NodeMonitorGracePeriod > 0 {
		args = append(args, "--node-monitor-grace-period="+opts.NodeMonitorGracePeriod.String())
	}
	return args, nil
}

func (c *Cluster) schedulerArgs() ([]string, error) {
	kubeconfig, err := c.userKubeconfig("system:kube-scheduler")
	if err != nil {
		return nil, err
	}
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--v=2", // why a pod waits for a node: its failed attempts and the events that requeue it
	}, nil
}

// waitForNamespaces waits until every named namespace exists.
func (c *Cluster) waitForNamespaces(ctx context.Context, names ...string) error {
	for _, name := range names {
		for {
			_, err := c.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				break
			}
			if !apierrors.IsNotFound(err) && ctx.Err() == nil {
				c.logf("waiting for namespace %s: %v", name, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for namespace %s: %w", name, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
