// Command palisade-executor is the node agent's termination executor, in a process of its own so
// that palisade-agent, which runs on every node all the time, does not carry the container
// runtime's clients (containerd, the CRI, gRPC, protobuf) in its memory. The agent starts it as
// a child process the first time it needs the runtime (a Terminate command or a self-fence) and
// keeps it for the heartbeats' read-back; it is not meant to be run by hand, but can be, for
// debugging.
//
// It speaks the protocol of palisade.dev/palisade/providers/executor/protocol:
// newline-delimited JSON requests on stdin, responses on stdout, answered concurrently by
// providers/executor/node over the runtime at --cri-endpoint, leaving out the agent's own pod
// (--pod-uid). Its logs are JSON on stderr,
// which the agent shares with it; its stdout carries the protocol only (anything else a
// library might print there goes to stderr).
//
// It exits when its stdin closes (the agent stopped it, or died), cancelling what runs; the
// agent also has the kernel kill it when the agent dies (Pdeathsig).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"k8s.io/klog/v2"

	"palisade.dev/palisade/config/logging"
	"palisade.dev/palisade/providers/executor/node"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "palisade-executor:", err)
		os.Exit(1)
	}
}

type options struct {
	criEndpoint string
	podUID      string
	verbosity   int
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("palisade-executor", flag.ContinueOnError)
	fs.StringVar(&o.criEndpoint, "cri-endpoint", "", "containerd's socket (a path or unix://path) (required)")
	fs.StringVar(&o.podUID, "pod-uid", "", "UID of the agent's own pod, which is neither terminated nor counted")
	fs.IntVar(&o.verbosity, "v", 0, "log verbosity")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.criEndpoint == "" {
		return o, errors.New("--cri-endpoint is required")
	}
	return o, nil
}

func run(args []string) error {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	out, err := protocolOutput()
	if err != nil {
		return err
	}
	log, flush, err := logging.New(o.verbosity)
	if err != nil {
		return err
	}
	log = log.WithName("executor")
	defer flush()
	klog.SetLogger(log.WithName("klog")) // the CRI client's logs, as JSON like the rest
	// An interrupt from a terminal reaches the agent's whole process group: the agent ends this
	// process by closing its stdin.
	signal.Ignore(os.Interrupt)
	log.V(1).Info("starting palisade-executor", "criEndpoint", o.criEndpoint, "podUID", o.podUID, "pid", os.Getpid())
	return node.NewServer(node.Config{CRIEndpoint: o.criEndpoint, PodUID: o.podUID}, out, log).Serve(os.Stdin)
}
