// Package machine gives the test bed real nodes: a Machine is a network namespace on a netns
// LAN (so nftables cuts partition it while its pods run) and a PID and mount namespace holding
// the node's own containerd, runc's shims and containers, and a real kubelet that joins the test
// bed's API server with system:node credentials. Its power follows an ipmi_sim BMC: off kills
// the PID namespace's init, and with it every process of the machine at once, containers
// included; on boots it again with a new boot ID, which a bind mount over
// /proc/sys/kernel/random/boot_id in the machine's mount namespace shows the kubelet. Killing
// the kubelet alone is "kubelet down". Simulated nodes (simnode) stay for scale.
package machine
