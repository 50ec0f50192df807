// Command witness-client is the container of the chaos runs' StatefulSet: it names itself from
// the downward API (POD_NAME, POD_UID, NODE_NAME) and the node's boot ID (the file at
// BOOT_ID_FILE, by default /proc/sys/kernel/random/boot_id), then appends to the witness store
// at WITNESS_URL every 100 ms until SIGTERM, on which it exits 0. Built static (CGO_ENABLED=0)
// so that it runs in the busybox image.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"palisade.dev/palisade/test/witness"
)

func main() {
	w, err := fromEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "witness-client: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w.Logf = log.New(os.Stderr, "witness-client: ", log.LstdFlags|log.Lmicroseconds).Printf
	w.Logf("writing as %+v to %s", w.Identity, w.URL)
	n := w.Run(ctx)
	w.Logf("terminated after %d accepted appends", n)
}

func fromEnv() (*witness.Writer, error) {
	w := &witness.Writer{URL: os.Getenv("WITNESS_URL"), Identity: witness.Identity{
		Pod: os.Getenv("POD_NAME"), PodUID: os.Getenv("POD_UID"), Node: os.Getenv("NODE_NAME")}}
	if w.URL == "" || w.Pod == "" {
		return nil, fmt.Errorf("WITNESS_URL and POD_NAME must be set")
	}
	path := os.Getenv("BOOT_ID_FILE")
	if path == "" {
		path = "/proc/sys/kernel/random/boot_id"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the boot ID: %w", err)
	}
	w.BootID = strings.TrimSpace(string(b))
	return w, nil
}
