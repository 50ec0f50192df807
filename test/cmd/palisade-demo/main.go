// Command palisade-demo cuts a node's power on a real control plane built by `make testbed`
// and prints the timeline of Palisade fencing it. It needs the test bed, so it is a test-only
// command: run it as `make demo`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "palisade-demo:", err)
		os.Exit(1)
	}
}
