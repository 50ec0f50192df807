// Command palisade-agent is Palisade's node agent. Every interval it checks its kubelet's
// healthz endpoint and sends a heartbeat straight to the controller over mutually authenticated
// TLS, independent of the API server, so that the controller can tell a dead node from one cut
// off from the control plane or one whose kubelet is down. It stops cleanly on SIGTERM. With
// --request-certificate it gets its client certificate through the Kubernetes CSR API with its
// pod's ServiceAccount token, and renews it (certs.go; no client-go, to stay small).
//
// The controller may answer a heartbeat with a Terminate command. The agent then, once per
// command ID and in the background: has its executor connect to containerd (--cri-endpoint;
// without one it answers Failed "no runtime configured"); runs --kubelet-stop-command, so that
// nothing restarts the pods; and has the executor list the pods of the runtime by the kubelet's
// labels, leaving out the agent's own (--pod-uid), and rebuild each one from those labels and
// the kubelet's container annotations (grace periods, preStop hooks, ports), as the kubelet
// does without the pod's spec; terminate all of them at once with the termination executor,
// each grace period capped by the command's; read every pod back (executor.Confirm) and sweep
// the whole runtime. Its heartbeats report Running meanwhile, then Confirmed (only once every
// pod was read back with no container running) or Failed, with what still runs.
// --executor-timeout bounds it all.
//
// The executor is a child process, palisade-executor (--executor-binary; by default next to the
// agent's own executable, else in $PATH), so that the agent itself, running on every node all
// the time, does not carry the runtime's clients (containerd, the CRI, gRPC) in its memory. The
// agent starts it on the first command that needs the runtime (a Terminate command or a
// self-fence), and keeps it: it also answers every heartbeat's read-back of the containers
// still running (RunningContainers), within half of what is left of the heartbeat's timeout,
// so that a slow or hung executor never holds a heartbeat. They speak newline-delimited JSON
// over its stdin and stdout (palisade-executor/protocol); its logs share the agent's stderr. It
// exits when its stdin closes or the agent dies. An executor that cannot be started, ends, hangs
// past --executor-timeout, or writes garbage fails the command (never Confirmed) with what to
// do; the next command starts a new one, and so, for the read-back, does the agent in the
// background (at most every 10 s) once an executor had been connected.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"palisade.dev/palisade/providers/agent/channel"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "palisade-agent:", err)
		os.Exit(1)
	}
}

type options struct {
	controller, nodeName  string
	cert, key, ca         string
	serverName            string
	interval              time.Duration
	kubeletHealthz        string
	verbosity             int
	controllerCallTimeout time.Duration

	criEndpoint        string
	kubeletStopCommand string
	executorTimeout    time.Duration
	podUID             string
	faultConfirmEarly  bool
	executorBinary     string

	selfFenceAfter   time.Duration
	apiServerHealthz string
	watchdogDevice   string

	probeAddress string
	apiCommands  bool
	apiTLSName   string
	probeHost    string
	kubeletPort  int

	certs certOptions // --request-certificate and its flags (certs.go)
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("palisade-agent", flag.ContinueOnError)
	fs.StringVar(&o.controller, "controller-address", "", "host:port of the controller's heartbeat server (required)")
	fs.StringVar(&o.serverName, "controller-server-name", "", "name the controller's certificate must carry (default: the host of --controller-address)")
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node; must be the CommonName of --cert (default $NODE_NAME)")
	fs.StringVar(&o.cert, "cert", "", "agent client certificate (PEM), re-read on change (required)")
	fs.StringVar(&o.key, "key", "", "key of --cert (PEM), re-read on change (required)")
	fs.StringVar(&o.ca, "ca", "", "CA bundle the controller's certificate must chain to (required)")
	fs.DurationVar(&o.interval, "interval", time.Second, "heartbeat interval")
	fs.StringVar(&o.kubeletHealthz, "kubelet-healthz", "http://127.0.0.1:10248/healthz", "URL of the kubelet's healthz endpoint")
	fs.IntVar(&o.verbosity, "v", 0, "log verbosity (0: info; 1: every heartbeat)")
	fs.StringVar(&o.criEndpoint, "cri-endpoint", "", `containerd's socket (a path or unix://path) for Terminate commands; "" disables the executor`)
	fs.StringVar(&o.kubeletStopCommand, "kubelet-stop-command", "", `command line run with /bin/sh -c before terminating, so that nothing restarts the pods (e.g. "nsenter -t 1 -m -- systemctl stop kubelet"); its failure fails the command; "" runs none`)
	fs.DurationVar(&o.executorTimeout, "executor-timeout", 2*time.Minute, "time limit of one Terminate command")
	fs.StringVar(&o.executorBinary, "executor-binary", "", `the palisade-executor binary, which the agent starts as a child process when it first needs the container runtime (a Terminate command or a self-fence); "" finds palisade-executor next to the agent's own executable, else in $PATH`)
	fs.StringVar(&o.podUID, "pod-uid", os.Getenv("POD_UID"), "UID of the agent's own pod, which Terminate leaves running (default $POD_UID)")
	fs.DurationVar(&o.selfFenceAfter, "self-fence-after", 0, "fence this node itself (stop the kubelet, terminate every pod, then the watchdog) once neither the controller nor the API server has been reachable for longer than this; 0 disables self-fencing")
	fs.StringVar(&o.apiServerHealthz, "api-server-healthz", "", `URL the agent GETs every interval to see whether it reaches the API server (e.g. https://<apiserver>/readyz); only a 200 counts, so it must answer unauthenticated requests. TLS verification is skipped for this reachability probe only. "" treats the API server as unreachable`)
	fs.StringVar(&o.watchdogDevice, "watchdog-device", "", `hardware watchdog device (e.g. /dev/watchdog) the agent opens after a self-fence, writes once and never pets again, so that the watchdog reboots the node; it must exist (it is not created). "" uses none`)
	fs.BoolVar(&o.apiCommands, "api-commands", true, "watch this node's NodeFence for orders through the API server (for a node whose kubelet is down), with --api-server, --api-token-file and --api-ca-file; without an API server, orders arrive only over the direct channel")
	fs.StringVar(&o.apiTLSName, "api-tls-server-name", "", "name the API server's certificate must carry, when --api-server's host is not in it (e.g. behind a relay)")
	fs.StringVar(&o.probeAddress, "probe-address", ":9444", `address to accept peer probes on (TLS: the answer is this agent's certificate, which names its node); "" accepts none, and then this agent probes no peers either`)
	fs.StringVar(&o.probeHost, "probe-advertise-host", "", "IP address peers probe this node at (default: the address the controller sees its heartbeats come from)")
	fs.IntVar(&o.kubeletPort, "kubelet-port", 10250, "the kubelet's port, which peers probe too (a node whose agent crashed but whose kubelet answers is not dead); 0: not probed")
	fs.BoolVar(&o.faultConfirmEarly, "fault-report-confirmed-early", false, "testing only: report Confirmed without terminating")
	o.certs.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	missing := []error{o.certs.validate(o.cert, o.key, o.ca)}
	required := map[string]string{"controller-address": o.controller, "node-name": o.nodeName}
	if !o.certs.request {
		required["cert"], required["key"], required["ca"] = o.cert, o.key, o.ca
	}
	for name, v := range required {
		if v == "" {
			missing = append(missing, fmt.Errorf("--%s is required", name))
		}
	}
	if o.interval <= 0 {
		missing = append(missing, errors.New("--interval must be positive"))
	}
	if o.executorTimeout <= 0 {
		missing = append(missing, errors.New("--executor-timeout must be positive"))
	}
	if o.kubeletPort < 0 || o.kubeletPort > 65535 {
		missing = append(missing, errors.New("--kubelet-port must be a port number or 0"))
	}
	if o.selfFenceAfter < 0 {
		missing = append(missing, errors.New("--self-fence-after must not be negative"))
	}
	o.controllerCallTimeout = o.interval
	return o, errors.Join(missing...)
}

func newLogger(verbosity int) (logr.Logger, func(), error) {
	cfg := zap.NewProductionConfig() // JSON to stderr
	cfg.Level = zap.NewAtomicLevelAt(zapcore.Level(-verbosity))
	cfg.Sampling = nil
	zl, err := cfg.Build()
	if err != nil {
		return logr.Discard(), func() {}, fmt.Errorf("building logger: %w", err)
	}
	return zapr.NewLogger(zl), func() { _ = zl.Sync() }, nil
}

func run(args []string) error {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, flush, err := newLogger(o.verbosity)
	if err != nil {
		return err
	}
	defer flush()
	klog.SetLogger(log.WithName("klog")) // logs of the Kubernetes libraries, as JSON like the rest
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	if o.certs.request {
		if o.cert, o.key, o.ca, err = requestCertificate(ctx, o.certs, o.nodeName, log.WithName("certificates")); err != nil {
			return err
		}
	}
	client, err := channel.NewClient(channel.ClientOptions{
		Address: o.controller, ServerName: o.serverName, CertFile: o.cert, KeyFile: o.key, CAFile: o.ca,
		Timeout: o.controllerCallTimeout, Logger: log.WithName("tls"),
	})
	if err != nil {
		return err
	}
	defer client.Close()
	if id, err := client.Identity(); err != nil || id != o.nodeName {
		return fmt.Errorf("checking the agent certificate: it names node %q (%v), this is node %q", id, err, o.nodeName)
	}
	bootID, err := channel.ReadBootID()
	if err != nil {
		log.Error(err, "no boot ID: the controller will not see reboots")
	}
	cmds := newCommander(o, log)
	defer cmds.close()
	h := newHeartbeater(o, client, cmds, bootID, log)
	h.fence = newSelfFencer(o, cmds, log, time.Now())
	if o.apiCommands && o.certs.apiServer != "" {
		api, err := newAPIClient(o.certs.apiServer, o.certs.tokenFile, o.certs.apiCAFile)
		if err != nil {
			return fmt.Errorf("orders through the API server (--api-commands): %w", err)
		}
		if o.apiTLSName != "" {
			api.http.Transport.(*http.Transport).TLSClientConfig.ServerName = o.apiTLSName
		}
		go newAPICommands(api, o.nodeName, o.interval, cmds, log.WithName("api-commands")).run(ctx)
	}
	if o.probeAddress != "" {
		probes, err := channel.ListenProbes(o.probeAddress, o.cert, o.key, log.WithName("probes"))
		if err != nil {
			return fmt.Errorf("listening for peer probes on --probe-address %s: %w", o.probeAddress, err)
		}
		defer probes.Close()
		go probes.Serve()
		dialer, err := channel.NewProbeDialer(o.ca, log.WithName("probes"))
		if err != nil {
			return err
		}
		h.probePort, h.peers = probes.Port(), newProber(o.interval, log.WithName("peers"), dialer.Probe)
		go h.peers.run(ctx)
	}
	log.Info("starting palisade-agent", "Node", klog.KRef("", o.nodeName), "controller", o.controller, "interval", o.interval.String(), "bootID", bootID,
		"criEndpoint", o.criEndpoint, "podUID", o.podUID, "selfFenceAfter", o.selfFenceAfter.String(), "apiServerHealthz", o.apiServerHealthz,
		"watchdogDevice", o.watchdogDevice)
	if o.selfFenceAfter > 0 && o.criEndpoint == "" {
		log.Info("WARNING: --self-fence-after without --cri-endpoint: a self-fence would fail (no runtime configured) and only arm the watchdog")
	}
	if o.criEndpoint != "" && o.podUID == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		log.Info("WARNING: running in a pod without --pod-uid ($POD_UID from the downward API): a Terminate command would stop the agent's own pod too")
	}
	if o.faultConfirmEarly {
		log.Info("FAULT INJECTION: --fault-report-confirmed-early is set: Terminate commands will be reported Confirmed without terminating anything")
	}
	h.run(ctx)
	log.Info("stopping palisade-agent", "reason", context.Cause(ctx).Error(), "heartbeatsSent", h.seq)
	return nil
}

// discard drains a response body so that its connection can be reused.
func discard(r io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r, 4096))
	_ = r.Close()
}
