// Command csi-node is the test bed's CSI node plugin (csidriver.StartNode), run on every real
// machine as a daemon: it registers with the machine's kubelet and publishes volumes by bind
// mount from the storage directory every machine reaches. It is a stand-in: no real storage
// backend runs here.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"palisade.dev/palisade/test/testbed/csidriver"
)

func main() {
	var o csidriver.NodeOptions
	flag.StringVar(&o.Socket, "socket", "", "CSI socket to serve")
	flag.StringVar(&o.RegistrationDir, "registration-dir", "", "the kubelet's plugins_registry directory")
	flag.StringVar(&o.NodeID, "node-id", "", "the node's ID (its name)")
	flag.StringVar(&o.VolumesDir, "volumes-dir", "", "directory holding one directory per volume")
	flag.Parse()
	p, err := csidriver.StartNode(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "csi-node:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "csi-node: serving %s for node %s, registered in %s\n", o.Socket, o.NodeID, o.RegistrationDir)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	p.Stop()
}
