// Command palisade is Palisade's command-line tool: `palisade status` shows the fencing
// policies and node fences of the cluster in the current kubeconfig context.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: palisade <command>

commands:
  status  show the fencing policies and node fences of the cluster in the current
          kubeconfig context, each fence with its latest step

The demo (cut a node's power on a real control plane and watch Palisade fence it) needs the
test bed and is not part of this tool: run "make demo" in a checkout.
`

// errDemoMoved answers "palisade demo", the verb of earlier versions.
var errDemoMoved = errors.New(`the demo is no longer part of the palisade CLI: it needs the test bed, ` +
	`so it is the test-only command test/cmd/palisade-demo; run "make demo" in a checkout`)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "status":
		err = status(ctx, os.Stdout)
	case "demo":
		err = errDemoMoved
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "palisade: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "palisade:", err)
		os.Exit(1)
	}
}
