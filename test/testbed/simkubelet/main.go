// Command simkubelet is a stand-in for the kubelet, for Palisade's test bed only. No real
// kubelet can run on the machines the tests run on: it would have to own the machine (its
// cgroups, mounts and container runtime), which the tests share with each other and with the
// rest of the test bed. So this small process does the parts of a kubelet that Palisade looks
// at, as a separate process that a test can start inside a node's network namespace
// (package netns), cut off from the API server, or kill:
//
//   - it renews the node's Lease in kube-node-lease every --renew-interval, creating it when
//     missing as the kubelet does (holder = node name, owned by the Node, its duration four
//     renewal intervals as the kubelet's: 40s at the default 10s), and
//     keeps the Node's Ready condition True with a fresh heartbeat (a kubelet that reaches the
//     API server reports itself Ready; once the node lifecycle controller has marked it
//     Unknown, the next successful round sets it back);
//   - it serves the kubelet's healthz on --healthz-address (plain HTTP, 200 "ok" while it
//     runs, cut off or not, like the kubelet's);
//   - it listens on --port-address, the kubelet's port that peers probe, accepting and
//     closing every connection.
//
// It does not register the Node, run pods or report their status: package simnode does that
// (with Options.ExternalLease). SIGTERM or SIGINT stops it cleanly; SIGKILL is how a test
// simulates a dead kubelet. Logs are JSON lines on stderr; failing renewals are logged once
// when they start failing, and once when they recover.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "simkubelet: %v\n", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	kubeconfig     string
	nodeName       string
	renewInterval  time.Duration
	healthzAddress string
	portAddress    string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("simkubelet", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file of the API server to renew the Lease through (required)")
	fs.StringVar(&o.nodeName, "node-name", "", "name of the Node whose Lease is renewed (required)")
	fs.DurationVar(&o.renewInterval, "renew-interval", 10*time.Second, "how often the Lease is renewed (the kubelet's: a quarter of its 40s duration)")
	fs.StringVar(&o.healthzAddress, "healthz-address", "127.0.0.1:10248", "address of the plain-HTTP healthz endpoint")
	fs.StringVar(&o.portAddress, "port-address", "0.0.0.0:10250", "address of the stand-in for the kubelet's port: connections are accepted and closed")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if o.kubeconfig == "" {
		errs = append(errs, errors.New("--kubeconfig is required"))
	}
	if o.nodeName == "" {
		errs = append(errs, errors.New("--node-name is required"))
	}
	if o.renewInterval <= 0 {
		errs = append(errs, errors.New("--renew-interval must be positive"))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args()))
	}
	return o, errors.Join(errs...)
}

func run(args []string) error {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("node", o.nodeName)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	hb, err := newHeartbeat(o, log)
	if err != nil {
		return err
	}
	srv, err := serve(o, log)
	if err != nil {
		return err
	}
	log.Info("started", "healthz", srv.healthzAddr, "port", srv.portAddr, "renewInterval", o.renewInterval.String())
	hb.run(ctx)
	log.Info("stopping")
	srv.close()
	return nil
}
