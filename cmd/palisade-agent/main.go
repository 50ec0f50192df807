// Command palisade-agent is Palisade's node agent: flags and wiring. Every interval it checks
// its kubelet's healthz and sends a heartbeat straight to the controller over mutually
// authenticated TLS, independent of the API server (detectors/heartbeat), with what it sees of
// its peers (detectors/peers). It carries out the controller's orders, from the heartbeats'
// answers or its NodeFence (providers/agent/orders), through its palisade-executor child
// process (providers/executor/child), so that the agent itself links none of the container
// runtime's clients, handing it the specs it keeps of its node's pods while the API server
// answers (providers/agent/podspecs); it fences its node itself when isolated
// (providers/agent/selffence); with --request-certificate it gets and renews its certificate
// through the CSR API (providers/agent/pki). It stops cleanly on SIGTERM.
//
// `palisade-agent gateway` runs the storage gateway instead, on a storage host: it serves the
// controller's storage fences (config/gatewaywire) with nftables (providers/agent/gateway).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/config/logging"
	"palisade.dev/palisade/detectors/heartbeat"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/orders"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/providers/agent/podspecs"
	"palisade.dev/palisade/providers/agent/selffence"
)

// DefaultStateDir is where the agent keeps what must outlive it (the highest fencing token it
// took, the specs of its node's pods); the chart mounts it from the node.
const DefaultStateDir = "/var/lib/palisade"

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
	noDatagrams           bool

	criEndpoint        string
	kubeletStopCommand string
	executorTimeout    time.Duration
	podUID             string
	faultConfirmEarly  bool
	stateDir           string
	executorBinary     string

	selfFenceAfter   time.Duration
	apiServerHealthz string
	watchdogDevice   string
	watchdogTimeout  time.Duration
	watchdogStandIn  bool

	probeAddress string
	apiCommands  bool
	keepSpecs    bool
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
	fs.BoolVar(&o.noDatagrams, "no-heartbeat-datagrams", false, "send every heartbeat over HTTPS; by default, once the controller gives this agent a key over HTTPS, heartbeats go as UDP datagrams authenticated with it, to the port number of --controller-address, with HTTPS as the fallback")
	fs.StringVar(&o.kubeletHealthz, "kubelet-healthz", "http://127.0.0.1:10248/healthz", "URL of the kubelet's healthz endpoint")
	fs.IntVar(&o.verbosity, "v", 0, "log verbosity (0: info; 1: every heartbeat)")
	fs.StringVar(&o.criEndpoint, "cri-endpoint", "", `containerd's socket (a path or unix://path) for Terminate commands; "" disables the executor`)
	fs.StringVar(&o.kubeletStopCommand, "kubelet-stop-command", "", `command line run with /bin/sh -c before terminating, so that nothing restarts the pods (e.g. "nsenter -t 1 -m -- systemctl stop kubelet"); its failure fails the command; "" runs none`)
	fs.DurationVar(&o.executorTimeout, "executor-timeout", 2*time.Minute, "time limit of one Terminate command")
	fs.StringVar(&o.executorBinary, "executor-binary", "", `the palisade-executor binary, which the agent starts as a child process when it first needs the container runtime (a Terminate command or a self-fence); "" finds palisade-executor next to the agent's own executable, else in $PATH`)
	fs.StringVar(&o.podUID, "pod-uid", os.Getenv("POD_UID"), "UID of the agent's own pod, which Terminate leaves running (default $POD_UID)")
	fs.DurationVar(&o.selfFenceAfter, "self-fence-after", 0, "fence this node itself (stop the kubelet, terminate every pod, then the watchdog) once neither the controller (a heartbeat it accepted), the API server (while the kubelet answers healthy) nor any peer (a probe its agent acknowledged) has been reachable for longer than this; 0 disables self-fencing")
	fs.StringVar(&o.apiServerHealthz, "api-server-healthz", "", `URL the agent GETs every interval to see whether it reaches the API server (e.g. https://<apiserver>/readyz); only a 200 counts, so it must answer unauthenticated requests. TLS verification is skipped for this reachability probe only. "" treats the API server as unreachable`)
	fs.StringVar(&o.watchdogDevice, "watchdog-device", "", `hardware watchdog device (e.g. /dev/watchdog) the agent opens after a self-fence, writes once and never pets again, so that the watchdog reboots the node (with --watchdog-timeout: opened at the start and petted until then); it must exist (it is not created). "" uses none`)
	fs.DurationVar(&o.watchdogTimeout, "watchdog-timeout", 0, "with --watchdog-device and --self-fence-after: open the watchdog at the start, set this timeout on it (whole seconds; the device's own, read back, counts), and pet it from a loop of its own (every quarter of the timeout, at least once a second) while the node was reached at most --self-fence-after ago, so that the node is reset even when this agent stops (crashes, is killed) while its node is cut off; the heartbeats then promise a self-fence within --self-fence-after plus twice this timeout (the kernel pings a watchdog closed without the magic character once more). A graceful exit withdraws the promise (a farewell heartbeat) and disarms it (magic close) unless the node is isolated or the controller did not take the farewell; a crash does not, and the node is reset unless the agent is started again within the timeout. The device must be free: systemd's RuntimeWatchdogSec or a watchdog daemon holding it makes the start fail (EBUSY). 0: the watchdog is armed only by a self-fence")
	fs.BoolVar(&o.watchdogStandIn, "watchdog-stand-in", false, "testing only: accept a --watchdog-device without the watchdog ioctls (a file or FIFO standing in for one), counting --watchdog-timeout as its timeout")
	fs.BoolVar(&o.apiCommands, "api-commands", true, "watch this node's NodeFence for orders through the API server (for a node whose kubelet is down), with --api-server, --api-token-file and --api-ca-file; without an API server, orders arrive only over the direct channel")
	fs.BoolVar(&o.keepSpecs, "keep-pod-specs", true, "list and watch the pods bound to this node through the API server (--api-server, --api-token-file, --api-ca-file) and keep what the executor needs of their specs that the container runtime does not record (which init containers are sidecars, lifecycle.stopSignal, a deletion's grace period given after the containers were created), in memory and in --state-dir (file "+podspecs.File+"), so that a Terminate command or a self-fence after the API server became unreachable still has them; false, or without an API server or --cri-endpoint: the executor restores every pod from the runtime's labels")
	fs.StringVar(&o.apiTLSName, "api-tls-server-name", "", "name the API server's certificate must carry, when --api-server's host is not in it (e.g. behind a relay)")
	fs.StringVar(&o.probeAddress, "probe-address", ":9444", `address to accept peer probes on (TLS: the answer is this agent's certificate, which names its node); "" accepts none, and then this agent probes no peers either`)
	fs.StringVar(&o.probeHost, "probe-advertise-host", "", "IP address peers probe this node at (default: the address the controller sees its heartbeats come from)")
	fs.IntVar(&o.kubeletPort, "kubelet-port", 10250, "the kubelet's port, which peers probe too (a node whose agent crashed but whose kubelet answers is not dead); 0: not probed")
	fs.StringVar(&o.stateDir, "state-dir", DefaultStateDir, `directory on the node's disk (a hostPath) where the agent records the highest fencing token it took (file `+orders.TokenFile+`), so that after a restart it still refuses a late order of an older fence, the specs of its node's pods (file `+podspecs.File+`, see --keep-pod-specs), and when the node was last reached (file `+selffence.ReachedFile+`, with --self-fence-after), so that an agent restarted while its node is isolated counts the isolation from then, not from its restart; "" keeps them in memory only`)
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
	if o.interval <= 0 || o.interval > agentwire.MaxIntervalMillis*time.Millisecond {
		missing = append(missing, fmt.Errorf("--interval must be positive and at most %s", agentwire.MaxIntervalMillis*time.Millisecond))
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
	switch {
	case o.watchdogTimeout < 0:
		missing = append(missing, errors.New("--watchdog-timeout must not be negative"))
	case o.watchdogTimeout > 0 && (o.watchdogDevice == "" || o.selfFenceAfter <= 0):
		missing = append(missing, errors.New("--watchdog-timeout needs --watchdog-device and --self-fence-after: the watchdog is petted only while self-fencing is on"))
	case o.watchdogTimeout > 0 && o.watchdogTimeout < time.Second:
		missing = append(missing, errors.New("--watchdog-timeout must be at least 1s (watchdogs count whole seconds)"))
	case o.watchdogTimeout > 0 && o.selfFenceAfter+2*o.watchdogTimeout > agentwire.MaxSelfFenceWithinMillis*time.Millisecond:
		missing = append(missing, fmt.Errorf("--self-fence-after plus twice --watchdog-timeout is %s: the heartbeats promise a self-fence within at most %s (the controller refuses longer), so shorten either",
			o.selfFenceAfter+2*o.watchdogTimeout, agentwire.MaxSelfFenceWithinMillis*time.Millisecond))
	}
	o.controllerCallTimeout = o.interval
	return o, errors.Join(missing...)
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "gateway" {
		return runGateway(args[1:])
	}
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, flush, err := logging.New(o.verbosity)
	if err != nil {
		return err
	}
	defer flush()
	klog.SetLogger(log.WithName("klog")) // logs of the Kubernetes libraries, as JSON like the rest
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	if o.certs.request {
		if o.cert, o.key, o.ca, err = pki.Request(ctx, o.certs.requester(), o.nodeName, log.WithName("certificates")); err != nil {
			return err
		}
	}
	client, err := newClient(o, log)
	if err != nil {
		return err
	}
	defer client.Close()
	bootID, err := channel.ReadBootID()
	if err != nil {
		log.Error(err, "no boot ID: the controller will not see reboots")
	}
	api, err := newAPIClient(o)
	if err != nil {
		return err
	}
	cmds := orders.NewCommander(o.orders(bootID, keepPodSpecs(ctx, o, api, log)), log)
	defer cmds.Close()
	watchAPIOrders(ctx, o, api, cmds, log)
	prober, probePort, closeProbes, err := probePeers(ctx, o, log)
	if err != nil {
		return err
	}
	defer closeProbes()
	fence := selffence.New(o.selfFence(bootID), cmds, log, time.Now())
	if err := fence.ArmWatchdog(); err != nil {
		return err
	}
	h := heartbeat.New(o.heartbeat(bootID, probePort), client, cmds, fence, prober, log)
	logStart(o, bootID, log)
	h.Run(ctx)
	// A promise of a self-fence is withdrawn before the watchdog behind it is disarmed.
	withdrawn := fence.Within() > 0 && h.Farewell(o.controllerCallTimeout)
	fence.Close(time.Now(), withdrawn, h.Interval())
	log.Info("stopping palisade-agent", "reason", context.Cause(ctx).Error(), "heartbeatsSent", h.Seq())
	return nil
}
