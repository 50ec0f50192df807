// Command palisade-agent is Palisade's node agent. Every interval it checks its kubelet's
// healthz endpoint and sends a heartbeat straight to the controller over mutually authenticated
// TLS, independent of the API server, so that the controller can tell a dead node from one cut
// off from the control plane or one whose kubelet is down. It stops cleanly on SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"palisade.dev/palisade/detectors/agent"
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
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var missing []error
	for name, v := range map[string]string{"controller-address": o.controller, "node-name": o.nodeName, "cert": o.cert, "key": o.key, "ca": o.ca} {
		if v == "" {
			missing = append(missing, fmt.Errorf("--%s is required", name))
		}
	}
	if o.interval <= 0 {
		missing = append(missing, errors.New("--interval must be positive"))
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	client, err := agent.NewClient(agent.ClientOptions{
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
	bootID, err := agent.ReadBootID()
	if err != nil {
		log.Error(err, "no boot ID: the controller will not see reboots")
	}
	h := newHeartbeater(o, client, bootID, log)
	log.Info("starting palisade-agent", "Node", klog.KRef("", o.nodeName), "controller", o.controller, "interval", o.interval.String(), "bootID", bootID)
	h.run(ctx)
	log.Info("stopping palisade-agent", "reason", context.Cause(ctx).Error(), "heartbeatsSent", h.seq)
	return nil
}

// discard drains a response body so that its connection can be reused.
func discard(r io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r, 4096))
	_ = r.Close()
}
