// Package containerd runs a private, real container runtime for tests: Debian's containerd
// (1.6) with runc, started as a child process with its own root, state, runc root and socket in
// a temporary directory, configured as works on these machines (native
// snapshotter, restrict_oom_score_adj, no AppArmor). It installs nothing: `make deps` does, and
// Start fails with "run make deps" when a binary is missing. No registry can be reached, so
// images are built in Go with go-containerregistry from Debian's static busybox and its applet
// links (BuildImage), and imported with ctr; the sandbox image the configuration names is such
// an image, whose only process sleeps. Pods are made through the CRI with host networking and
// the kubelet's labels (RunPod), and EventScript gives a container a shell script that records,
// in a host-mounted file, when it starts, which signals it receives and a heartbeat, all stamped
// with the monotonic clock of /proc/uptime, so that tests measure from the container's own view
// (ReadEvents). Stop removes every pod, stops containerd and its shims, and unmounts what they
// left.
package containerd
