// Package selffence is the node agent's last resort: the Fencer fences the node itself once it
// has been isolated (no controller, no API server, no peer) for longer than its threshold, by
// the order path of a Terminate (stop the kubelet, terminate every pod, read back), and then
// arms the hardware watchdog and never pets it, so that the node reboots.
package selffence
