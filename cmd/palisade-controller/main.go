// Command palisade-controller runs Palisade's fencing controller: it watches node Leases and
// fence requests, fences failed nodes through the methods of their FencingPolicy, confirms the
// fence, and only then releases the node's pods and volume attachments. `palisade-controller
// uninstall` is the chart's pre-delete hook instead (package uninstall).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"palisade.dev/palisade/cmd/palisade-controller/app"
	"palisade.dev/palisade/cmd/palisade-controller/uninstall"
	"palisade.dev/palisade/config/logging"
	"palisade.dev/palisade/detectors/sight"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/providers/ipmi"
	providermetrics "palisade.dev/palisade/providers/metrics"
	"palisade.dev/palisade/providers/power"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "palisade-controller:", err)
		os.Exit(1)
	}
}

type flags struct {
	opts            app.Options
	ipmitool        string
	providerTimeout time.Duration
	verbosity       int
}

func parseFlags() flags {
	var f flags
	flag.StringVar(&f.opts.MetricsAddr, "metrics-bind-address", ":8080", `address of the Prometheus metrics endpoint ("0" disables it)`)
	flag.StringVar(&f.opts.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.StringVar(&f.opts.PprofAddr, "pprof-bind-address", "", `address of Go's /debug/pprof profiles, for profiling on demand ("" disables it)`)
	flag.BoolVar(&f.opts.LeaderElection, "leader-elect", true, "elect one active controller among replicas")
	flag.StringVar(&f.opts.LeaderElectionNS, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader-election Lease (default: the pod's)")
	flag.DurationVar(&f.opts.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "leader-election lease duration")
	flag.DurationVar(&f.opts.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "leader-election renew deadline")
	flag.DurationVar(&f.opts.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "leader-election retry period")
	flag.IntVar(&f.opts.FenceConcurrency, "fence-concurrency", fencing.DefaultConcurrency, "how many NodeFences advance at once, and how many nodes are looked at at once (a rack lost at once gets its fences created and released in parallel; each fence takes its own steps in order)")
	flag.BoolVar(&f.opts.APICompression, "api-compression", false, "ask the API server to gzip its responses, watches included (off: on the cluster's own network gzip costs the API server and the controller CPU for every Lease renewal it sends, and adds latency)")
	flag.DurationVar(&f.opts.AttachmentForceAge, "attachment-force-after", 30*time.Second, "how long the CSI attacher's detach error on a deleted VolumeAttachment of a fenced node must stand, and the attachment have waited since its deletion, before its finalizer is removed (an attacher that has not acted is waited for)")
	flag.StringVar(&f.ipmitool, "ipmitool", "ipmitool", "path of the ipmitool binary")
	flag.DurationVar(&f.providerTimeout, "provider-call-timeout", 15*time.Second, "timeout of one call to a BMC")
	flag.StringVar(&f.opts.Agents.Addr, "agent-listen-address", "", `address of the mTLS server for the node agents' direct heartbeats ("" disables it)`)
	flag.BoolVar(&f.opts.Agents.NoDatagrams, "no-agent-heartbeat-datagrams", false, "accept the agents' heartbeats over HTTPS only; by default the heartbeat server also reads UDP datagrams on the same port number, authenticated with a key it gives each agent over HTTPS, so that it holds no connection per agent")
	flag.StringVar(&f.opts.Agents.CertFile, "agent-tls-cert", "", "server certificate for the agent heartbeat server (re-read on change)")
	flag.StringVar(&f.opts.Agents.KeyFile, "agent-tls-key", "", "server key for the agent heartbeat server")
	flag.StringVar(&f.opts.Agents.CAFile, "agent-ca", "", "CA bundle that agents' client certificates must chain to")
	flag.StringVar(&f.opts.AgentCerts.CASecret, "agent-ca-secret", "", `Secret (in the controller's namespace) holding the agents' CA, created if missing; set, the controller signs the agents' CSRs (signer palisade.dev/agent) and writes its own server certificate to --agent-tls-cert, --agent-tls-key and --agent-ca ("" disables)`)
	flag.StringVar(&f.opts.AgentCerts.CAConfigMap, "agent-ca-configmap", "palisade-agent-ca", "ConfigMap (in the controller's namespace) where the agents' CA bundle is published")
	flag.StringVar(&f.opts.AgentCerts.AgentServiceAccount, "agent-service-account", "", "namespace/name of the agents' ServiceAccount: only its pod-bound tokens get agent certificates, and the AgentsSilent hold judges the heartbeat channel only by nodes that have a pod of it, bound or created for them, within the last 2 minutes (a node the agent DaemonSet no longer covers is not an agent silent for ever); unset, by every node whose agent was heard or that is marked palisade.dev/agent")
	flag.Func("agent-tls-hosts", "comma-separated DNS names and IPs of the heartbeat server's certificate (the heartbeat Service's names)", func(v string) error {
		f.opts.AgentCerts.ServerHosts = strings.Split(v, ",")
		return nil
	})
	flag.StringVar(&f.opts.Pod.Namespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the controller's pod (default $POD_NAMESPACE), also of the agents' CA Secret and ConfigMap")
	flag.StringVar(&f.opts.Pod.Name, "pod-name", os.Getenv("POD_NAME"), fmt.Sprintf("name of the controller's pod (default $POD_NAME), which the leader labels %s=true so that the heartbeat Service routes agents to it; \"\" disables", app.LabelAgentEndpoint))
	flag.IntVar(&f.verbosity, "v", 0, "log verbosity (0: info; higher: debug)")
	flag.Parse()
	f.opts.AgentCerts.Namespace = f.opts.Pod.Namespace
	return f
}

func run() error {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "uninstall":
			return runUninstall(os.Args[2:])
		case "check-metrics":
			return runCheckMetrics(os.Args[2:])
		}
	}
	f := parseFlags()
	log, err := newLogger(f.verbosity)
	if err != nil {
		return err
	}
	if limit, err := app.SetMemoryLimit("/sys/fs/cgroup"); err != nil {
		log.Error(err, "could not read the container's memory limit; the Go runtime keeps no memory limit (set GOMEMLIMIT to give one)")
	} else if limit > 0 {
		log.Info("Go runtime memory limit set from the container's", "bytes", limit, "ratio", app.MemoryLimitRatio)
	}

	if pct := app.SetGCPercent(); pct > 0 {
		log.Info("Go garbage collection target set (GOGC overrides it)", "percent", pct)
	} else {
		log.Info("Go garbage collection target from GOGC", "GOGC", os.Getenv("GOGC"))
	}

	fencing.RegisterMetrics(crmetrics.Registry)
	sight.RegisterMetrics(crmetrics.Registry)
	providermetrics.Register(crmetrics.Registry)
	f.opts.IPMI = []ipmi.Option{ipmi.WithIpmitoolPath(f.ipmitool), ipmi.WithTimeout(f.providerTimeout), ipmi.WithLogger(log.WithName("ipmi"))}
	f.opts.Redfish = []power.Option{power.WithTimeout(f.providerTimeout), power.WithLogger(log.WithName("redfish"))}
	f.opts.AWS = []power.Option{power.WithTimeout(f.providerTimeout), power.WithLogger(log.WithName("aws"))}
	f.opts.VSphere = []power.Option{power.WithTimeout(f.providerTimeout), power.WithLogger(log.WithName("vsphere"))}
	mgr, err := app.NewManager(ctrl.GetConfigOrDie(), f.opts)
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	log.Info("starting palisade-controller", "leaderElection", f.opts.LeaderElection)
	return mgr.Start(ctx)
}

// newLogger logs JSON to stderr (config/logging), and is controller-runtime's logger too.
func newLogger(verbosity int) (logr.Logger, error) {
	zlog, _, err := logging.New(verbosity)
	if err != nil {
		return logr.Discard(), err
	}
	log := app.LazyValues(zlog)
	ctrl.SetLogger(log)
	return log, nil
}

// runUninstall is `palisade-controller uninstall`, the chart's pre-delete hook: see package
// uninstall.
func runUninstall(args []string) error {
	o, err := uninstall.ParseFlags(args)
	if err != nil {
		return err
	}
	if o.Log, err = newLogger(0); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("configuring the API client: %w", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("building the API client: %w", err)
	}
	o.Log.Info("uninstalling: stopping the controller, removing Palisade's finalizer and annotation from the nodes and deleting its run-time objects")
	return uninstall.Run(ctrl.SetupSignalHandler(), c, o)
}
