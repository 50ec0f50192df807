package main

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"palisade.dev/palisade/detectors/heartbeat"
	"palisade.dev/palisade/detectors/peers"
	"palisade.dev/palisade/providers/agent/apiclient"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/orders"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/providers/agent/podspecs"
	"palisade.dev/palisade/providers/agent/selffence"
	"palisade.dev/palisade/providers/executor/child"
	"palisade.dev/palisade/providers/executor/protocol"
)

// Each component gets its own small configuration, cut from the flags here.

// orders is the Commander's configuration; specs, when not nil, keeps the pod specs it hands
// to the executor.
func (o options) orders(bootID string, specs *podspecs.Keeper) orders.Config {
	var pods func() []protocol.Pod
	if specs != nil {
		pods = specs.Pods
	}
	return orders.Config{
		PodSpecs:           pods,
		BootID:             bootID,
		Executor:           child.Config{Binary: o.executorBinary, CRIEndpoint: o.criEndpoint, PodUID: o.podUID, Verbosity: o.verbosity},
		Timeout:            o.executorTimeout,
		KubeletStopCommand: o.kubeletStopCommand,
		ReadBackWait:       o.interval,
		FaultConfirmEarly:  o.faultConfirmEarly,
		StateDir:           o.stateDir,
	}
}

func (o options) selfFence(bootID string) selffence.Config {
	return selffence.Config{After: o.selfFenceAfter, APIServerHealthz: o.apiServerHealthz, WatchdogDevice: o.watchdogDevice, Interval: o.interval,
		StateDir: o.stateDir, BootID: bootID, WatchdogTimeout: o.watchdogTimeout, WatchdogStandIn: o.watchdogStandIn}
}

func (o options) heartbeat(bootID string, probePort int) heartbeat.Config {
	return heartbeat.Config{
		Node: o.nodeName, BootID: bootID, Interval: o.interval, CallTimeout: o.controllerCallTimeout,
		KubeletHealthz: o.kubeletHealthz, ProbePort: probePort, ProbeHost: o.probeHost, KubeletPort: o.kubeletPort,
	}
}

// newClient opens the direct channel to the controller and checks that the agent's certificate
// names this node.
func newClient(o options, log logr.Logger) (*channel.Client, error) {
	client, err := channel.NewClient(channel.ClientOptions{
		Address: o.controller, ServerName: o.serverName, CertFile: o.cert, KeyFile: o.key, CAFile: o.ca,
		Timeout: o.controllerCallTimeout, Logger: log.WithName("tls"), NoDatagrams: o.noDatagrams,
	})
	if err != nil {
		return nil, err
	}
	if id, err := client.Identity(); err != nil || id != o.nodeName {
		client.Close()
		return nil, fmt.Errorf("checking the agent certificate: it names node %q (%v), this is node %q", id, err, o.nodeName)
	}
	return client, nil
}

// newAPIClient is the agent's client of the API server, for orders (--api-commands) and pod
// specs (--keep-pod-specs); nil when neither is wanted or there is no API server.
func newAPIClient(o options) (*apiclient.Client, error) {
	if o.certs.apiServer == "" || !o.apiCommands && !o.keepsPodSpecs() {
		return nil, nil
	}
	api, err := apiclient.New(o.certs.apiServer, o.certs.tokenFile, o.certs.apiCAFile)
	if err != nil {
		return nil, fmt.Errorf("orders and pod specs through the API server (--api-commands, --keep-pod-specs): %w", err)
	}
	if o.apiTLSName != "" {
		api.SetServerName(o.apiTLSName)
	}
	return api, nil
}

// keepsPodSpecs says whether the pod specs are wanted: kept for the executor alone.
func (o options) keepsPodSpecs() bool { return o.keepSpecs && o.criEndpoint != "" }

// watchAPIOrders starts watching this node's NodeFence for orders (--api-commands), when there
// is an API server.
func watchAPIOrders(ctx context.Context, o options, api *apiclient.Client, cmds *orders.Commander, log logr.Logger) {
	if !o.apiCommands || api == nil {
		return
	}
	w := orders.NewAPIWatcher(api, orders.WatchConfig{Node: o.nodeName, Interval: o.interval}, cmds, log.WithName("api-commands"))
	go w.Run(ctx)
}

// keepPodSpecs starts keeping the specs of this node's pods (--keep-pod-specs), when there is
// an API server and an executor; nil otherwise.
func keepPodSpecs(ctx context.Context, o options, api *apiclient.Client, log logr.Logger) *podspecs.Keeper {
	if !o.keepsPodSpecs() || api == nil {
		return nil
	}
	k := podspecs.New(api, podspecs.Config{Node: o.nodeName, StateDir: o.stateDir, Retry: o.interval}, log.WithName("pod-specs"))
	go k.Run(ctx)
	return k
}

// probePeers answers peers' probes on --probe-address and probes the peers the controller
// assigns; without a probe address it does neither (a nil Prober, port 0).
func probePeers(ctx context.Context, o options, log logr.Logger) (heartbeat.Prober, int, func(), error) {
	if o.probeAddress == "" {
		return nil, 0, func() {}, nil
	}
	log = log.WithName("probes")
	cert, err := pki.KeyPairSource(o.cert, o.key, log)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("loading the agent certificate for probes: %w", err)
	}
	pool, err := pki.CAPoolSource(o.ca, log)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("loading the CA for probes: %w", err)
	}
	probes, err := peers.ListenProbes(o.probeAddress, cert.Current, pool.Current, log)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("listening for peer probes on --probe-address %s: %w", o.probeAddress, err)
	}
	go probes.Serve()
	p := peers.NewProber(peers.Config{Interval: o.interval}, log.WithName("peers"), peers.NewProbeDialer(pool.Current, cert.Current).Probe)
	go p.Run(ctx)
	return peers.Peers{Prober: p, ProbeServer: probes}, probes.Port(), probes.Close, nil
}

// logStart says how the agent runs, and warns of flags that contradict each other.
func logStart(o options, bootID string, log logr.Logger) {
	log.Info("starting palisade-agent", "Node", klog.KRef("", o.nodeName), "controller", o.controller, "interval", o.interval.String(), "bootID", bootID,
		"criEndpoint", o.criEndpoint, "podUID", o.podUID, "selfFenceAfter", o.selfFenceAfter.String(), "apiServerHealthz", o.apiServerHealthz,
		"watchdogDevice", o.watchdogDevice, "watchdogTimeout", o.watchdogTimeout.String(), "keepPodSpecs", o.keepsPodSpecs() && o.certs.apiServer != "")
	if o.selfFenceAfter > 0 && o.criEndpoint == "" {
		log.Info("WARNING: --self-fence-after without --cri-endpoint: a self-fence would fail (no runtime configured) and only leave the node to the watchdog")
	}
	if o.selfFenceAfter > 0 && o.watchdogTimeout <= 0 {
		log.Info("WARNING: --self-fence-after without a petted watchdog (--watchdog-device with --watchdog-timeout): this agent promises the controller no self-fence, since it fences nothing once it stops, and a SelfFence method does not rely on it (SelfFenceNotArmed)")
	}
	if o.criEndpoint != "" && o.podUID == "" {
		// The agent's own pod's sandbox is what tells the kubelet's runtime from another.
		log.Info("without --pod-uid the runtime at --cri-endpoint cannot be verified as the kubelet's: a Terminate command trusts that it is",
			"criEndpoint", o.criEndpoint)
		if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			log.Info("WARNING: running in a pod without --pod-uid ($POD_UID from the downward API): a Terminate command would stop the agent's own pod too")
		}
	}
	if o.faultConfirmEarly {
		log.Info("FAULT INJECTION: --fault-report-confirmed-early is set: Terminate commands will be reported Confirmed without terminating anything")
	}
}
